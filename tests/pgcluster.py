"""Extra Postgres 15 clusters for the tests, made with Debian's cluster tools and dropped after.

Each cluster is `relay_t_<hex>` (`.ci/run` drops any left behind), trusts loopback for users and
replication, and never touches the `main` cluster. A cluster binds to the loopback addresses it
is given (127.0.0.2, 127.0.0.3, … are all this machine), so two can share one port, which is the
multi-host URL form that needs no port per host. A standby is a `pg_basebackup -R` copy of a
primary, streaming from a replication slot.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import pytest
from databases import admin_execute

from relay.store import resolve
from relay.store.sql.migrate import upgrade

VERSION = "15"
PREFIX = "relay_t_"
SUPERUSER = "postgres"
TOOLS = ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster", "pg_basebackup", "psql")
READY_S = 60.0
# Quick to make and to lose: a test cluster holds nothing worth an fsync.
FAST = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}


def require(*binaries: str, root: bool = False) -> None:
    """Skip unless every binary is on PATH (and, for `root`, this process is root, as Debian's
    cluster tools need); under CI either is a failure, never a skip."""
    missing = [name for name in binaries if shutil.which(name) is None]
    reason = f"not installed on this machine: {', '.join(missing)}" if missing else ""
    if not reason and root and os.geteuid() != 0:
        reason = "making a Postgres cluster needs root (pg_createcluster writes /etc/postgresql)"
    if not reason:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI requires it: {reason}")
    pytest.skip(reason)


def sh(*args: str, timeout: float = 120) -> str:
    """Run a command to completion; its stdout, or an error carrying all it printed."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def as_postgres(*args: str) -> tuple[str, ...]:
    """`args` run as the cluster owner when this process is root (Postgres tools refuse root)."""
    return ("runuser", "-u", SUPERUSER, "--", *args) if os.geteuid() == 0 else args


def free_port(hosts: Sequence[str] = ("127.0.0.1",)) -> int:
    """A port nothing listens on at any of `hosts` (bound, then released)."""
    while True:
        with socket.socket() as first:
            first.bind((hosts[0], 0))
            port = int(first.getsockname()[1])
        try:
            for host in hosts:
                with socket.socket() as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return port


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@dataclass
class PgCluster:
    """One extra cluster: its name, port and the loopback addresses it listens on."""

    name: str
    port: int
    hosts: tuple[str, ...]
    dropped: bool = field(default=False)

    @property
    def host(self) -> str:
        return self.hosts[0]

    @property
    def conf(self) -> Path:
        return Path("/etc/postgresql") / VERSION / self.name

    @property
    def data(self) -> Path:
        return Path("/var/lib/postgresql") / VERSION / self.name

    def url(self, database: str = "postgres", *, host: str | None = None, **query: str) -> str:
        """A `postgresql://` URL of this cluster as the superuser, with `query` parameters."""
        tail = f"?{urlencode(query)}" if query else ""
        return f"postgresql://{SUPERUSER}@{host or self.host}:{self.port}/{database}{tail}"

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement as the superuser; its rows, one a line, `|` between columns."""
        args = ("psql", "-X", "-Atq", "-v", "ON_ERROR_STOP=1", "-h", self.host)
        return sh(*args, "-p", str(self.port), "-U", SUPERUSER, "-d", database, "-c", statement)

    def configure(self, settings: Mapping[str, str]) -> None:
        """Write `settings` into the cluster's conf.d (read at the next start or reload)."""
        lines = [f"{key} = '{value}'" for key, value in settings.items()]
        path = self.conf / "conf.d" / "relay-test.conf"
        existing = path.read_text() if path.exists() else ""
        path.write_text(existing + "\n".join(lines) + "\n")

    def start(self) -> None:
        ctl = ("pg_ctlcluster", "--skip-systemctl-redirect", VERSION, self.name)
        sh(*ctl, "start")
        self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_S
        while not listening(self.host, self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster {self.name} is not listening after {READY_S}s")
            time.sleep(0.05)

    def stop(self, mode: str = "fast") -> None:
        """`pg_ctlcluster stop -m MODE`: `immediate` is a crash, as a lost machine looks."""
        ctl = ("pg_ctlcluster", "--skip-systemctl-redirect", VERSION, self.name)
        sh(*ctl, "stop", "-m", mode)

    def promote(self) -> None:
        """Promote a standby and wait until it takes writes."""
        sh("pg_ctlcluster", "--skip-systemctl-redirect", VERSION, self.name, "promote")
        deadline = time.monotonic() + READY_S
        while self.sql("SELECT pg_is_in_recovery()").strip() != "f":
            if time.monotonic() > deadline:
                raise RuntimeError(f"standby {self.name} still in recovery after {READY_S}s")
            time.sleep(0.05)

    def drop(self) -> None:
        if not self.dropped:
            self.dropped = True
            sh("pg_dropcluster", "--stop", VERSION, self.name)


def _create(name: str, hosts: tuple[str, ...], port: int | None) -> PgCluster:
    """`pg_createcluster` on a free port, retried on another if one is taken meanwhile."""
    for _ in range(5):
        chosen = port or free_port(hosts)
        try:
            sh("pg_createcluster", VERSION, name, "--port", str(chosen), "--", "--auth=trust")
        except RuntimeError:
            if port is not None or not Path("/etc/postgresql", VERSION, name).exists():
                raise
            sh("pg_dropcluster", VERSION, name)
            continue
        cluster = PgCluster(name, chosen, hosts)
        with (cluster.conf / "pg_hba.conf").open("a") as hba:
            # Every loopback address, not only 127.0.0.1, for users and for replication.
            hba.write("host all all 127.0.0.0/8 trust\nhost replication all 127.0.0.0/8 trust\n")
        # A socket per cluster: two clusters on one port must not claim the same socket file.
        sockets = Path("/var/run/postgresql") / name
        sockets.mkdir(parents=True, exist_ok=True)
        shutil.chown(sockets, SUPERUSER, SUPERUSER)
        cluster.configure(
            {**FAST, "listen_addresses": ",".join(hosts), "unix_socket_directories": str(sockets)}
        )
        return cluster
    raise RuntimeError(f"no free port for cluster {name}")


def new_name() -> str:
    return f"{PREFIX}{uuid.uuid4().hex[:10]}"


def create_cluster(
    hosts: Sequence[str] = ("127.0.0.1",),
    settings: Mapping[str, str] | None = None,
    *,
    port: int | None = None,
) -> PgCluster:
    """A new, started cluster listening on `hosts` (a free port unless `port` is given)."""
    cluster = _create(new_name(), tuple(hosts), port)
    try:
        cluster.configure(settings or {})
        cluster.start()
    except BaseException:
        cluster.drop()
        raise
    return cluster


def new_cluster(hosts: Sequence[str] = ("127.0.0.1",), *, port: int | None = None) -> PgCluster:
    """A new cluster, configured but not started (a standby's files replace its data)."""
    return _create(new_name(), tuple(hosts), port)


def start_standby(primary: PgCluster, standby: PgCluster) -> None:
    """Make the unstarted `standby` a synchronous streaming copy of `primary` (`pg_basebackup -R`
    through a slot of its own) and start it.

    Synchronous, with `synchronous_commit` on (the test clusters turn it off), so that every
    commit the primary acknowledged is on the standby when it is promoted: an asynchronous standby
    may lack the last moments of a loaded primary, which is Postgres's choice, not the relay's."""
    for entry in standby.data.iterdir():  # the directory itself stays, owned by postgres
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    source = ("-h", primary.host, "-p", str(primary.port), "-U", SUPERUSER)
    into = ("-D", str(standby.data), "-R", "-X", "stream", "-C", "-S", standby.name)
    sh(*as_postgres("pg_basebackup", *source, *into))
    standby.start()
    # After the base backup, so the standby, once promoted, waits for no standby of its own.
    primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
    primary.sql("ALTER SYSTEM SET synchronous_commit = 'on'")
    primary.sql("SELECT pg_reload_conf()")
    deadline = time.monotonic() + READY_S
    while primary.sql("SELECT sync_state FROM pg_stat_replication").strip() != "sync":
        if time.monotonic() > deadline:
            raise RuntimeError(f"standby {standby.name} not synchronous after {READY_S}s")
        time.sleep(0.05)


def drop_all(clusters: Sequence[PgCluster]) -> None:
    """Drop every cluster, stopping each, whatever happened to the others."""
    errors = []
    for cluster in clusters:
        try:
            cluster.drop()
        except Exception as error:  # the rest are still dropped
            errors.append(error)
        shutil.rmtree(Path("/var/run/postgresql") / cluster.name, ignore_errors=True)
    if errors:
        raise errors[0]


@dataclass(frozen=True)
class FailoverPair:
    """A primary on 127.0.0.2 and its streaming standby on 127.0.0.3, on one port."""

    primary: PgCluster
    standby: PgCluster

    def url(self, database: str, *, port_per_host: bool = False) -> str:
        """A multi-host URL that finds whichever of the two takes writes."""
        first, second = self.primary, self.standby
        if port_per_host:
            hosts = f"{first.host}:{first.port},{second.host}:{second.port}"
        else:
            hosts = f"{first.host},{second.host}:{first.port}"
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"


async def migrated_database(cluster: PgCluster) -> str:
    """A new database on `cluster`, migrated to head; its name."""
    name = f"relay_{uuid.uuid4().hex[:12]}"
    await admin_execute(cluster.url(), f'CREATE DATABASE "{name}"')
    await upgrade(resolve(cluster.url(name)))
    return name
