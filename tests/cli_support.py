"""Helpers for the `talaria-relay` acceptance tests: run the command, build and compare state.

`run` runs the command (`relay.cli.main(argv)`) in this process, as a child would see it: its own
XDG_STATE_HOME and environment, the repository as working directory, its stdout and stderr
(WARNING log lines included, as Python prints them without a handler) captured, its exit code;
`run(..., process=True)` starts the real `python -m relay` in a subprocess instead, for what only a
process shows (its entry point, and a few tests kept end to end). An interpreter start costs about
a second of CPU; the in-process call, a few milliseconds.
`populate` drives the in-process harness to leave realistic state in a store; `snapshot` reads
every record a store holds, in a form that compares equal across backends.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import io
import json
import logging
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import pytest
from harness import relay_env
from key_support import ed25519_pem
from sqlalchemy import make_url

from relay.store import RelayStore, open_store

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 60
LEGACY_FLOOR = 1_799_999_999_999
LEGACY_NOW = 1_800_000_000_000
IDENTITY_ALPHA = "pfi_" + "a1" * 16
IDENTITY_BETA = "pfi_" + "b2" * 16


# ── running the command ───────────────────────────────────────────────────────


@dataclass(frozen=True)
class Result:
    """What one run of the command did."""

    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def describe(self) -> str:
        return (
            f"talaria-relay {' '.join(self.args)} exited {self.code} after {self.seconds:.1f}s\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The XDG_STATE_HOME of every child of one test."""
    path = tmp_path / "xdg"
    path.mkdir()
    return path


def cli(home: Path, *args: str, **options: Any) -> Result:
    """`run`, and no traceback in what it printed."""
    result = run(home, *args, **options)
    assert "Traceback" not in result.output, result.describe()
    return result


def expect(result: Result, code: int) -> Result:
    """`result`, once its exit code is `code`."""
    assert result.code == code, result.describe()
    return result


# A hint's command, as printed between backticks.
_HINT = re.compile(r"`(talaria-relay [^`]*)`")


def pasted(text: str) -> list[str]:
    """The arguments of the one command `text` names (maybe more than once), split as a shell
    splits a paste."""
    found = set(_HINT.findall(text))
    assert len(found) == 1, text
    words = shlex.split(found.pop())
    assert words[0] == "talaria-relay"
    return words[1:]


def sqlite_url(path: Path) -> str:
    """The SQLite store URL of the file at `path`."""
    return f"sqlite:///{path}"


def json_url(path: Path) -> str:
    """The JSON store URL of the directory at `path`."""
    return f"json://{path}"


def child_env(state_home: Path, **extra: str) -> dict[str, str]:
    """The environment of a child: this one, its own XDG_STATE_HOME, no default store URL."""
    env = {k: v for k, v in os.environ.items() if k != "TALARIA_RELAY_STORE_URL"}
    env["XDG_STATE_HOME"] = str(state_home)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "relay", *args]


def run(
    state_home: Path,
    *args: str,
    timeout: float = RUN_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    process: bool = False,
) -> Result:
    """Run `talaria-relay ARGS` to completion (bounded by `timeout`), here or in a subprocess."""
    if not process:
        return _run_here(state_home, args, timeout, env or {})
    started = time.monotonic()
    done = subprocess.run(
        command(*args),
        cwd=ROOT,
        env=child_env(state_home, **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Result(
        tuple(args), done.returncode, done.stdout, done.stderr, time.monotonic() - started
    )


def _run_here(
    state_home: Path, args: tuple[str, ...], timeout: float, env: Mapping[str, str]
) -> Result:
    """`run` in this process: the child's environment, working directory and streams, swapped
    in for the call and restored after it."""
    from relay.cli import main

    stdout, stderr = _stream(), _stream()
    outcome: list[int] = []

    def call() -> None:
        with (
            _environment(child_env(state_home, **env)),
            contextlib.chdir(ROOT),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
            _warnings_to(stderr),
        ):
            outcome.append(_exit_code(lambda: main(list(args)), stderr))

    started = time.monotonic()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        call()
    else:
        # An async test's loop is running here; the command runs its own, so in a thread, which
        # the test waits for as it would for a subprocess.
        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise AssertionError(f"talaria-relay {' '.join(args)} ran over {timeout}s")
    return Result(tuple(args), outcome[0], _text(stdout), _text(stderr), time.monotonic() - started)


def _stream() -> io.TextIOWrapper:
    # A text stream over bytes, as a child's piped stdout is (it has a `.buffer`).
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8", errors="replace")


def _exit_code(main: Callable[[], int], stderr: IO[str]) -> int:
    """The exit code the interpreter would give `sys.exit(main())`."""
    try:
        return main()
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=stderr)
        return 1
    except Exception:
        traceback.print_exc(file=stderr)
        return 1


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    # In place: the library reads `os.environ` itself (and binds it as a default argument).
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _warnings_to(stderr: IO[str]) -> Iterator[None]:
    """Log records at WARNING and up reach `stderr` as bare messages, as a child with no handler
    prints them (`logging.lastResort`); pytest's own handlers still see them. Only the command's:
    from this thread or one started since, not from a thread an earlier test left running."""
    caller, earlier = threading.get_ident(), {thread.ident for thread in threading.enumerate()}
    handler = logging.StreamHandler(stderr)
    handler.setLevel(logging.WARNING)
    handler.addFilter(lambda record: record.thread == caller or record.thread not in earlier)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


_HELD: list[socket.socket] = []


@atexit.register
def _release() -> None:
    for held in _HELD:
        held.close()


def free_port() -> int:
    """A loopback port nothing listens on: bound, never listening, and held by this process for
    its life, so a connection is refused and no other process (another test worker) takes it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return int(sock.getsockname()[1])


class _Drain:
    """Read a child's pipe to its end in a thread, so the child never blocks on a full pipe."""

    def __init__(self, pipe: IO[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self.lines.put(line)
        pipe.close()

    def next_line(self, deadline: float) -> str | None:
        """The next line, or None at its end or at the deadline."""
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None
        self.seen.append(line)
        return line

    def rest(self, timeout: float) -> str:
        """Everything left, once the pipe has closed."""
        self._thread.join(timeout)
        while not self.lines.empty():
            self.seen.append(self.lines.get_nowait())
        return "".join(self.seen)


@dataclass
class DevRelayProcess:
    """A running `talaria-relay dev-relay` and what it printed on startup."""

    process: subprocess.Popen[str]
    url: str
    invitation: str
    startup: list[str]
    stdout: _Drain
    stderr: _Drain

    def stop(self, timeout: float = 15) -> tuple[int, str, str]:
        """SIGTERM it; its exit code and all of its stdout and stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)
            raise AssertionError(f"dev-relay ignored SIGTERM for {timeout}s") from None
        return code, self.stdout.rest(timeout), self.stderr.rest(timeout)


@contextlib.contextmanager
def dev_relay(state_home: Path, timeout: float = 20) -> Iterator[DevRelayProcess]:
    """Start `talaria-relay dev-relay --port 0`; wait for its URL and invitation; stop it after."""
    process = subprocess.Popen(
        command("dev-relay", "--port", "0"),
        cwd=ROOT,
        env=child_env(state_home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    stdout, stderr = _Drain(process.stdout), _Drain(process.stderr)
    lines: list[str] = []
    url = invitation = None
    deadline = time.monotonic() + timeout
    try:
        while url is None or invitation is None:
            line = stdout.next_line(deadline)
            if line is None:
                raise AssertionError(
                    f"dev-relay printed no URL and invitation: {lines}\n{stderr.rest(1)}"
                )
            lines.append(line.rstrip("\n"))
            key, _, value = line.partition(":")
            if key == "relay URL":
                url = value.strip()
            elif key == "invitation" and invitation is None:  # the first: the owner's
                invitation = value.split()[0]
        yield DevRelayProcess(process, url, invitation, lines, stdout, stderr)
    finally:
        if process.poll() is None:
            process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


# ── Postgres without the relay's code ─────────────────────────────────────────


def asyncpg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def pg_tables(url: str) -> list[str]:
    """The tables in the public schema of the database at `url`."""
    import asyncpg

    conn = await asyncpg.connect(asyncpg_dsn(url), timeout=10)
    try:
        rows = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
    finally:
        await conn.close()
    return sorted(row["table_name"] for row in rows)


# ── state ─────────────────────────────────────────────────────────────────────


async def populate(store: RelayStore) -> dict[str, Any]:
    """Leave every kind of record in `store`, as a web app and its relay service would.

    Registered, two enrolled profiles, a spare identity, sessions announced (sent) and one not
    yet (unsent), an empty ledger scope, deletions bound and unbound awaiting acknowledgement, an
    active and a revoked presence lease. The clock is real time, so the active lease is live.
    """
    async with relay_env(store, profiles=("default", "work", "spare")) as env:
        env.clock.now = time.time()
        await env.pair()
        await env.pair("work", user="usr_work", operator=False)
        config = await env.config()
        default_id = config.profiles["default"].profile_id
        work_id = config.profiles["work"].profile_id

        env.host.create_session("chat-one", "default", "First")
        env.host.start_run("chat-one")
        assert await env.publish() is None
        env.clock.advance(2)
        env.host.create_session("chat-two", "work", "Second")
        env.host.start_run("chat-two")
        assert await env.publish() is None
        await env.service.update_presence(
            {"tab_id": "tab-active-0001", "active": True, "seq": 7}, "work"
        )
        await env.service.update_presence(
            {"tab_id": "tab-revoked-001", "active": False, "seq": 3}, "default"
        )
        env.clock.advance(2)
        # Left for the next pass: a deletion bound to its scope, never acknowledged here.
        env.host.create_session("chat-gone", "default", "Gone")
        env.host.delete_session("chat-gone")
        await env.service.clear_deleted("chat-gone", "default")

    now_ms = int(time.time() * 1000)
    await store.record_started_scopes({work_id: [("chat-unsent", now_ms)]}, now_ms)
    await store.track_started(["prf_empty_scope"], now_ms)
    await store.enqueue_deleted(
        "chat-unbound", "work", now_ms + 5, session_live=False, identity=None, scope=None
    )
    await store.profile_identity("spare")
    await store.allocate_revisions(3, now_ms)
    return {"default_id": default_id, "work_id": work_id}


async def snapshot(url: str, **options: Any) -> dict[str, Any]:
    """Every record of the store at `url`, comparable across backends.

    The config's key reference and generation are backend-specific and left out; the key itself
    (its PEM) is compared. Claims on ledger entries are not copied by design and left out.
    """
    async with open_store(url, **options) as store:
        config = await store.load_config()
        registration = None
        if config is not None:
            registration = {
                "url": config.url,
                "publisher_id": config.publisher_id,
                "key_id": config.key_id,
                "profiles": dict(config.profiles),
                "pem": await store.load_key(config.key_ref),
            }
        ledger = [
            replace(
                scope,
                entries=tuple(
                    replace(entry, claimed_by=None, claimed_until=None) for entry in scope.entries
                ),
            )
            for scope in await store.started_ledger()
        ]
        return {
            "registration": registration,
            "identities": await store.identities(),
            "revision_floor": await store.revision_floor(),
            "started": sorted(ledger, key=lambda scope: scope.profile_id),
            "deleted": sorted(await store.pending_deleted(), key=lambda view: view.id),
            "presence": sorted(
                await store.presence_leases(), key=lambda lease: (lease.profile, lease.tab_id)
            ),
        }


def write_legacy_state(state: Path, homes: Mapping[str, Path]) -> str:
    """A state dir and profile homes as the Python original left them; returns the key's PEM.

    Spec §3.7 (config v2 with `private_key_path`), §4.7 (started ledger), §5.2 (revision file,
    PEM beside the config, `<profile home>/.talaria-relay-profile-id`).
    """
    state.mkdir(parents=True, exist_ok=True)
    pem = ed25519_pem()
    key = state / "talaria-relay-publisher-0123456789abcdef.pem"
    key.write_text(pem)
    key.chmod(0o600)
    config = {
        "key_id": "key-legacy",
        "private_key_path": str(key),
        "profiles": {
            "alpha": {"identity": IDENTITY_ALPHA, "profile_id": "prf_alpha"},
            "beta": {"identity": IDENTITY_BETA, "profile_id": "prf_beta"},
        },
        "publisher_id": "https://hermes.example",
        "url": "https://relay.example",
        "version": 2,
    }
    (state / "talaria-relay.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (state / "talaria-relay-revision").write_text(f"{LEGACY_FLOOR}\n")
    ledger = {
        "version": 1,
        "profiles": [
            {
                "profileId": "prf_alpha",
                "floor": LEGACY_NOW - 5000,
                "sessions": [
                    {"sessionId": "earlier", "startedAt": LEGACY_NOW - 2000, "sent": True},
                    {"sessionId": "later", "startedAt": LEGACY_NOW - 1000, "sent": False},
                ],
            },
            {
                "profileId": "prf_beta",
                "floor": LEGACY_NOW - 4000,
                "sessions": [{"sessionId": "beta-one", "startedAt": LEGACY_NOW, "sent": True}],
            },
        ],
    }
    (state / "talaria-relay-started.json").write_text(json.dumps(ledger))
    identities = {"alpha": IDENTITY_ALPHA, "beta": IDENTITY_BETA}
    for name, home in homes.items():
        home.mkdir(parents=True, exist_ok=True)
        (home / ".talaria-relay-profile-id").write_text(identities[name] + "\n")
        (home / ".talaria-relay-profile-id").chmod(0o600)
    return pem


def files_of(*directories: Path) -> dict[str, bytes]:
    """Every file under `directories` (bar the JSON store's lock file) by path, with its bytes."""
    return {
        str(path): path.read_bytes()
        for directory in directories
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != ".talaria-relay.lock"
    }
