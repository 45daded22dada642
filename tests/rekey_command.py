"""The rekey crash test's commands: the moves between passphrases, run whole or killed (kill -9).

A killed command is killed either after a delay or the moment its write shows in the store: a
file made or changed in a JSON state dir, frames in SQLite's WAL, Postgres running the UPDATE.
The write lasts milliseconds of the seconds the scrypt derivations before it take, so a drawn
delay seldom lands in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import forked
from cli_support import ROOT, Result, asyncpg_dsn, child_env, run
from key_support import OTHER, PASSPHRASE
from rekey_at_cost import SCRYPT_LOG_N_ENV

from relay.store.files.io import TEMP
from relay.store.keys import pkcs8
from relay.store.keys.keyring import PASSPHRASE_ENV, PASSPHRASE_FILE_ENV

AT_COST = Path(__file__).with_name("rekey_at_cost.py")
PLAIN = "plain"
SECRETS = {"A": PASSPHRASE, "B": OTHER}  # each encrypted side's passphrase
NEW_ENV = "TALARIA_RELAY_NEW_PASSPHRASE"  # the variable `--to-passphrase-env` names
# A kill at the write comes at once half the time, else up to 2 ms later: inside it, or just past.
WRITE_JITTER_S = 0.002
POLL_S = 0.0005  # the event loop sleeps at least 1 ms: about a thousand looks a second
TIMEOUT_S = 60.0
UPDATING = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND pid <> pg_backend_pid() AND query LIKE 'UPDATE relay_keys%'"
)

Probe = Callable[[], Awaitable[bool]]


@dataclass(frozen=True)
class Move:
    """One rekey: every key from the side `old` to the side `new`, and how the command is told."""

    old: str
    new: str
    args: tuple[str, ...]
    env: dict[str, str]
    derivations: int  # scrypt derivations the command spends on a key

    def __str__(self) -> str:
        return f"{self.old} → {self.new}"


def moves(secret_file: Path) -> list[Move]:
    """plain → A → B → plain: the new passphrase from a variable once and from a file once, the
    current one from TALARIA_RELAY_KEY_PASSPHRASE once and from its _FILE once."""
    return [
        Move(PLAIN, "A", ("--to-passphrase-env", NEW_ENV), {NEW_ENV: SECRETS["A"]}, 1),
        Move(
            "A",
            "B",
            ("--to-passphrase-file", str(secret_file)),
            {PASSPHRASE_ENV: SECRETS["A"]},
            2,  # opened under A, sealed under B
        ),
        Move("B", PLAIN, ("--decrypt",), {PASSPHRASE_FILE_ENV: str(secret_file)}, 1),
    ]


# Plain to plain: the command's whole path (start-up, open, the transaction, exit) and no scrypt.
UNCHANGED = Move(PLAIN, PLAIN, ("--decrypt",), {}, 0)


def derivation_s() -> float:
    """What one scrypt derivation at the cost keys are sealed at takes on this machine now."""
    started = time.monotonic()
    pkcs8.encrypt(b"\x00" * 48, b"a calibration")
    return time.monotonic() - started


def printed_secret(output: str) -> bool:
    """Whether a command's output holds a passphrase or a private key."""
    return any(secret in output for secret in (*SECRETS.values(), "PRIVATE KEY-----"))


def json_temps(state_dir: Path) -> list[str]:
    """The temp files in a JSON state dir."""
    return sorted(name for name in os.listdir(state_dir) if TEMP.fullmatch(name))


def complete(url: str, home: Path, move: Move) -> Result:
    """Run the move's command to its end."""
    return run(home, "rekey", "--store", url, *move.args, env=move.env, timeout=TIMEOUT_S)


async def killed(
    url: str, backend: str, home: Path, move: Move, delay: float | None, rng: random.Random
) -> Result:
    """Run the move's command and kill -9 it `delay` seconds in, or (None) as its write shows.

    Its code is -9 unless it ended first.
    """
    started = time.monotonic()
    # The command seals at this process's cost: cheap in the suite, the real one in the soak.
    cost = {SCRYPT_LOG_N_ENV: str(pkcs8.SCRYPT_LOG_N)}
    process = await forked.start(
        AT_COST, "rekey", "--store", url, *move.args,
        cwd=ROOT, env=child_env(home, **move.env, **cost),
    )  # fmt: skip
    # Read all along: a command blocked on a full pipe would be killed there.
    output = asyncio.gather(process.stdout.read(), process.captured_stderr.read())
    if delay is not None:
        await asyncio.sleep(delay)
        _kill(process)
    else:
        async with _write_probe(url, backend) as shows:
            deadline = time.monotonic() + TIMEOUT_S
            while process.returncode is None and time.monotonic() < deadline:
                if await shows():
                    break
                await asyncio.sleep(POLL_S)
            if (jitter := rng.uniform(-WRITE_JITTER_S, WRITE_JITTER_S)) > 0:
                await asyncio.sleep(jitter)
            _kill(process)
    code = await process.wait()
    stdout, stderr = await output
    args = ("rekey", "--store", url, *move.args)
    seconds = time.monotonic() - started
    return Result(
        args, code, stdout.decode(errors="replace"), stderr.decode(errors="replace"), seconds
    )


def _kill(process: forked.Child) -> None:
    # Through the process object: it signals nothing once the child is reaped.
    with contextlib.suppress(ProcessLookupError):  # it ended by itself: its code says so
        process.kill()


@contextlib.asynccontextmanager
async def _write_probe(url: str, backend: str) -> AsyncIterator[Probe]:
    """A test of whether the command has begun to write its keys."""
    if backend == "json":
        # Any file made, replaced or written in place: not only the temp files of today's store.
        state_dir = Path(url.removeprefix("json://"))
        before = _files(state_dir)

        async def written() -> bool:
            return _files(state_dir) != before

        yield written
    elif backend == "sqlite":
        # The transaction reaches the WAL only as it commits: until then the file is empty.
        wal = Path(url.removeprefix("sqlite:///") + "-wal")

        async def committing() -> bool:
            return _size(wal) > 0

        yield committing
    else:
        conn = await asyncpg.connect(asyncpg_dsn(url), timeout=10)

        async def updating() -> bool:
            return bool(await conn.fetchval(UPDATING))

        try:
            yield updating
        finally:
            await conn.close()  # at once: the check waits for every session to end


def _files(directory: Path) -> dict[str, tuple[int, int, int]]:
    """Each file's inode, size and modification time, by name."""
    found = {}
    for name in os.listdir(directory):
        with contextlib.suppress(FileNotFoundError):  # renamed away meanwhile
            stat = os.stat(directory / name)
            found[name] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    return found


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
