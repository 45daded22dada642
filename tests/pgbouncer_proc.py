"""Debian's PgBouncer (1.18) in front of a Postgres server, on a free loopback port.

It refuses to run as root, so as root it is started with `-u postgres`, which makes it switch
to that user after reading its files. Any database name is passed through to the server
(`* =`), so the databases a test creates are reachable without a reload. Version 1.18 tracks no
prepared statements: in transaction mode the store must be told
`prepared_statement_cache_size=0`, which `url` adds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlencode

from pgcluster import SUPERUSER, free_port, listening

Mode = Literal["transaction", "session"]
HOST = "127.0.0.1"
READY_S = 30.0


@dataclass
class PgBouncer:
    """One running pgbouncer and where it listens."""

    mode: Mode
    port: int
    process: subprocess.Popen[bytes]
    directory: Path

    def url(self, database: str, **query: str) -> str:
        """The store URL of `database` through this bouncer."""
        if self.mode == "transaction":
            query = {"prepared_statement_cache_size": "0", **query}
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{database}?{urlencode(query)}"

    def log(self) -> str:
        return (self.directory / "pgbouncer.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)
        shutil.rmtree(self.directory, ignore_errors=True)


def start_pgbouncer(mode: Mode, server_host: str = HOST, server_port: int = 5432) -> PgBouncer:
    """A pgbouncer in `mode` pointing at the server, started and accepting connections."""
    directory = Path(tempfile.mkdtemp(prefix="relay-pgbouncer-"))
    root = os.geteuid() == 0
    if root:
        shutil.chown(directory, SUPERUSER, SUPERUSER)
    (directory / "users.txt").write_text(f'"{SUPERUSER}" ""\n')
    port = free_port()
    config = directory / "pgbouncer.ini"
    config.write_text(
        f"[databases]\n* = host={server_host} port={server_port}\n\n[pgbouncer]\n"
        f"listen_addr = {HOST}\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {directory / 'users.txt'}\npool_mode = {mode}\n"
        # Room for every replica and contract test at once; the server has 100 slots.
        "max_client_conn = 500\ndefault_pool_size = 40\n"
        f"log_connections = 0\nlog_disconnections = 0\npidfile = {directory / 'pgbouncer.pid'}\n"
    )
    for path in directory.iterdir():
        if root:
            shutil.chown(path, SUPERUSER, SUPERUSER)
    args = ["pgbouncer", *(["-u", SUPERUSER] if root else []), str(config)]
    with (directory / "pgbouncer.log").open("wb") as log:
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
    bouncer = PgBouncer(mode, port, process, directory)
    deadline = time.monotonic() + READY_S
    while not listening(HOST, port):
        if process.poll() is not None or time.monotonic() > deadline:
            said = bouncer.log()
            bouncer.stop()
            raise RuntimeError(f"pgbouncer did not start ({process.returncode}): {said}")
        time.sleep(0.05)
    return bouncer


class Bouncers:
    """PgBouncer in front of the main server, one a pool mode, started when first asked for."""

    def __init__(self) -> None:
        self._running: dict[Mode, PgBouncer] = {}

    def __call__(self, mode: Mode) -> PgBouncer:
        if mode not in self._running:
            self._running[mode] = start_pgbouncer(mode)
        return self._running[mode]

    def stop(self) -> None:
        for bouncer in self._running.values():
            bouncer.stop()
