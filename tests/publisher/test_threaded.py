"""`relay.threaded`: the async service behind blocking calls, from real threads and processes,
on a real SQLite store and a dev relay over loopback HTTP."""

from __future__ import annotations

import gc
import multiprocessing
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from threaded_support import ROOT, RelayThread, relay_thread, until

from examples.hermes import Sessions
from relay.errors import (
    CallTimeoutError,
    InvalidInputError,
    RelayError,
    RelayPairingError,
    ServiceStoppedError,
    SessionNotFoundError,
)
from relay.host import SessionMeta
from relay.threaded import ThreadedRelayService

BEAT = {"tab_id": "tab-00001", "active": True, "seq": 1}


class GatedSessions(Sessions):
    """Sessions whose `session_meta` waits at a gate once `hold` is set: a slow host call."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = threading.Event()
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.failing: set[str] = set()

    def session_meta(self, session_id: str) -> SessionMeta | None:
        if self.hold.is_set():
            self.entered.set()
            self.gate.wait(30)
        return super().session_meta(session_id)

    def session_index(self) -> Sequence[Any]:
        if "session_index" in self.failing:
            raise OSError("index unreadable")
        return super().session_index()


@pytest.fixture
def dev() -> Iterator[RelayThread]:
    with relay_thread() as relay:
        yield relay


def make(
    dev: RelayThread, tmp_path: Path, host: Sessions, store: str = "sqlite", **options: Any
) -> ThreadedRelayService:
    url = f"sqlite:///{tmp_path / 'relay.db'}" if store == "sqlite" else f"json://{tmp_path}"
    return ThreadedRelayService(
        url,
        host,
        relay_url=dev.url,
        allow_insecure_loopback=True,
        **options,
    )


def test_every_method_is_a_plain_call(dev: RelayThread, tmp_path: Path) -> None:
    """Pairing, publishing, presence, a turn's end, viewed and deletion reach the relay through
    blocking calls, and `changed()` wakes the publisher."""
    host = Sessions()
    with make(dev, tmp_path, host) as relay:
        assert relay.pair(dev.pairing(), "default", operator=True)["ok"] is True
        host.create("chat-1", "default", "Plan")
        host.start_run("chat-1", "s1")
        relay.changed()
        until(lambda: [r["phase"] for r in dev.rows()] == ["running"])
        assert relay.update_presence(BEAT, "default") == {"ok": True, "lease_seconds": 90}
        relay.note_terminal("s1", "completed")
        host.end_run("s1")
        relay.changed()
        relay.flush()
        assert [r["phase"] for r in dev.rows()] == ["completed"]
        relay.mark_viewed("chat-1")
        host.delete("chat-1")
        relay.clear_deleted("chat-1", "default")
        until(lambda: "chat-1" in dev.viewed())
        relay.profile_deleted("work")
        health = relay.health()
        assert (health.store_reachable, health.registered) == (True, True)
        assert dev.started() == ["chat-1"]


def test_a_first_call_starts_the_threaded_service(dev: RelayThread, tmp_path: Path) -> None:
    """Without `start()`, the threaded facade's first call (here a presence beat) starts the
    service, so a registered store publishes; `health()` alone starts nothing."""
    with make(dev, tmp_path, Sessions()) as relay:
        relay.pair(dev.pairing(), "default", operator=True)
    relay = make(dev, tmp_path, Sessions())
    try:
        health = relay.health()
        assert (health.registered, health.publishing, health.ready) == (True, False, False)
        assert relay.update_presence(BEAT, "default")["ok"] is True
        health = relay.health()
        assert (health.publishing, health.ready) == (True, True)
    finally:
        relay.stop()


def test_unpair_through_the_threaded_facade(dev: RelayThread, tmp_path: Path) -> None:
    """`unpair()` forgets the registration without starting the service first; pairing again
    then registers anew."""
    with make(dev, tmp_path, Sessions()) as relay:
        relay.pair(dev.pairing(), "default", operator=True)
    relay = make(dev, tmp_path, Sessions())
    try:
        assert not relay.unpair(if_relay_changed=True)  # the same relay: kept
        assert relay.unpair()
        assert not relay.health().registered
        assert relay.pair(dev.pairing(), "default", operator=True)["ok"] is True
        assert relay.health().registered
    finally:
        relay.stop()


def test_errors_are_the_async_services_own(dev: RelayThread, tmp_path: Path) -> None:
    """What the service raises is raised in the calling thread, of the same class."""
    with make(dev, tmp_path, Sessions()) as relay:
        with pytest.raises(RelayPairingError) as refused:
            relay.pair(
                {**dev.pairing(), "relay_url": "https://evil.example"}, "default", operator=True
            )
        assert refused.value.status == 400
        relay.pair(dev.pairing(), "default", operator=True)
        with pytest.raises(SessionNotFoundError):
            relay.mark_viewed("chat-404")
        with pytest.raises(RelayPairingError, match="Invalid presence request"):
            relay.update_presence({"tab_id": "short"}, "default")
        with pytest.raises(InvalidInputError):
            relay.health(timeout=0)
    with pytest.raises(InvalidInputError):
        ThreadedRelayService("memory://", Sessions(), timeout=-1)


def test_a_slow_host_call_stalls_nothing_else_and_times_out(
    dev: RelayThread, tmp_path: Path
) -> None:
    """While a host call hangs, other calls answer; the waiting caller gets `CallTimeoutError`
    after its timeout, and the service carries on."""
    host = GatedSessions()
    with make(dev, tmp_path, host) as relay:
        relay.pair(dev.pairing(), "default", operator=True)
        host.create("chat-1", "default", "Plan")
        host.hold.set()
        began = time.monotonic()
        with pytest.raises(CallTimeoutError) as late:
            relay.mark_viewed("chat-1", timeout=0.5)
        assert isinstance(late.value, TimeoutError)
        assert time.monotonic() - began < 10
        assert relay.update_presence(BEAT, "default")["ok"] is True
        assert relay.health().store_reachable
        host.hold.clear()
        host.gate.set()
        relay.mark_viewed("chat-1")


def test_stop_cuts_calls_in_flight_short(dev: RelayThread, tmp_path: Path) -> None:
    """`stop()` with a call stuck in the host returns within 5 s; that call and every later one
    raise `ServiceStoppedError`; a second stop and `changed()` do nothing; no thread is left once
    the host returns."""
    before = set(threading.enumerate())
    host = GatedSessions()
    relay = make(dev, tmp_path, host)
    relay.changed()  # before first use: nothing to wake
    relay.pair(dev.pairing(), "default", operator=True)
    host.create("chat-1", "default", "Plan")
    host.hold.set()
    errors: list[BaseException] = []

    def view() -> None:
        try:
            relay.mark_viewed("chat-1")
        except RelayError as error:
            errors.append(error)

    caller = threading.Thread(target=view)
    caller.start()
    assert host.entered.wait(10)
    began = time.monotonic()
    relay.stop()
    took = time.monotonic() - began
    caller.join(5)
    assert took < 5.0
    assert not caller.is_alive()
    assert [type(e) for e in errors] == [ServiceStoppedError]
    with pytest.raises(ServiceStoppedError):
        relay.health()
    relay.stop()
    relay.changed()
    host.gate.set()
    until(lambda: set(threading.enumerate()) <= before, within=10)


def test_stop_runs_at_exit_if_the_app_forgot(tmp_path: Path) -> None:
    """A process that never calls `stop()` stops the service at exit; `stop()` unregisters it."""
    script = f"""
import gc, logging, sys, weakref
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(message)s")
from examples.hermes import Sessions
from relay.threaded import ThreadedRelayService
kept = ThreadedRelayService("sqlite:///{tmp_path / "a.db"}", Sessions())
print("started", kept.start())
stopped = ThreadedRelayService("sqlite:///{tmp_path / "b.db"}", Sessions())
stopped.health()
stopped.stop()
gone = weakref.ref(stopped)
del stopped
gc.collect()
print("unregistered", gone() is None)
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    lines = result.stdout.splitlines()
    assert "started False" in lines
    assert "unregistered True" in lines
    assert sum("threaded relay service stopped" in line for line in lines) == 2, lines


def test_a_raising_host_method_is_warned_once(dev: RelayThread, tmp_path: Path) -> None:
    """A sync host method that raises on every pass is logged once, as the async path does."""
    host = GatedSessions()
    lines: list[str] = []
    with make(dev, tmp_path, host, log=lines.append) as relay:
        relay.pair(dev.pairing(), "default", operator=True)
        host.failing.add("session_index")
        for n in range(4):
            host.create(f"chat-{n}", "default", "Plan")
            relay.changed()
            relay.flush()
    failed = [line for line in lines if "Host" in line and "failed" in line]
    assert len(failed) == 1, lines
    assert "OSError: index unreadable" in failed[0]


def _child(relay: ThreadedRelayService, host: Sessions, answers: Any) -> None:
    """In a forked child: use the parent's service object as if nothing happened."""
    try:
        host.create("child-1", "default", "From the child")
        host.start_run("child-1", "c1")
        relay.changed()
        relay.flush()
        answers.put(("ok", relay.owner, relay.update_presence(BEAT, "default")))
        relay.stop()
    except Exception as error:
        answers.put(("error", repr(error), None))


# Python 3.12 warns of any fork() in a process with threads: forking one is what this proves.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_gets_a_service_of_its_own(dev: RelayThread, tmp_path: Path) -> None:
    """After `fork()` the child's first call makes it a service of its own (a new owner, started
    again because the parent's was), which publishes; the parent's goes on untouched."""
    host = Sessions()
    with make(dev, tmp_path, host, store="json") as relay:
        relay.pair(dev.pairing(), "default", operator=True)
        parent_owner = relay.owner
        status, owner, presence, code = _forked(relay, host)
        assert status == "ok", owner
        assert owner not in (None, parent_owner)
        assert presence == {"ok": True, "lease_seconds": 90}
        assert code == 0
        until(lambda: any(r["sessionId"] == "child-1" for r in dev.rows()))
        assert relay.owner == parent_owner
        assert relay.update_presence({**BEAT, "seq": 2}, "default")["ok"] is True
        assert relay.health().store_reachable


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_is_told_to_open_sqlite_after_the_fork(
    dev: RelayThread, tmp_path: Path
) -> None:
    """SQLite cannot share a database across fork(): the child's first call says so (and where
    to start the service instead); the parent's service goes on untouched."""
    host = Sessions()
    with make(dev, tmp_path, host) as relay:
        relay.pair(dev.pairing(), "default", operator=True)
        status, error, _, code = _forked(relay, host)
        assert status == "error"
        assert "StoreError" in error, error
        assert "forked" in error, error
        assert "post_fork" in error, error
        assert code == 0
        assert relay.update_presence(BEAT, "default")["ok"] is True
        host.create("parent-1", "default", "From the parent")
        host.start_run("parent-1", "p1")
        relay.changed()
        relay.flush()
        assert any(r["sessionId"] == "parent-1" for r in dev.rows())


def _forked(relay: ThreadedRelayService, host: Sessions) -> tuple[str, str, Any, int | None]:
    """`_child` in a forked child: its answer and exit code."""
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=_child, args=(relay, host, answers))
    child.start()
    status, owner, presence = answers.get(timeout=60)
    child.join(30)
    return status, owner, presence, child.exitcode


def test_ordered_shutdown_leaves_no_registration(tmp_path: Path) -> None:
    """A service that never ran holds no thread, registers nothing at exit, and stops at once."""
    before = set(threading.enumerate())
    relay = ThreadedRelayService(f"sqlite:///{tmp_path / 'x.db'}", Sessions())
    assert set(threading.enumerate()) == before
    relay.stop()
    gone = weakref.ref(relay)
    with pytest.raises(ServiceStoppedError):
        relay.start()
    del relay
    gc.collect()
    assert gone() is None
