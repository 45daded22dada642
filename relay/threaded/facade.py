"""`ThreadedRelayService`: `RelayService` as plain calls, for threaded and WSGI web servers.

    relay = ThreadedRelayService("sqlite:///relay.db", MyHost())   # a SyncHost, or an async Host
    relay.start()                    # resumes a saved registration; the publisher runs in a thread
    relay.changed()                  # never blocks
    relay.update_presence(body, "default")
    relay.stop()                     # or `with ThreadedRelayService(...) as relay:`; or at exit

The same `RelayService` runs on an event loop in a daemon thread of its own (started on first
use; a first call other than `start()`, `health()` or `unpair()` starts the service too, where
the async `RelayService` raises `ServiceNotStartedError`); every method is safe from any thread
and waits at most `timeout` seconds. Errors are the async service's own `relay.errors` classes,
raised in the calling thread; a call that takes too long raises `CallTimeoutError` (and is
cancelled), one cut short by `stop()` `ServiceStoppedError`.

Fork: a service used before `os.fork()` (gunicorn `--preload`, multiprocessing's fork) is made
again in the child, with a new loop, a new store connection and a new owner id: at once and
started if the parent had started it, else on the child's first call. The parent's connections
are left alone, and a fork never happens inside a store transaction (`relay.store.forkgate`).
On SQLite the child is refused the parent's file, which SQLite cannot share across a fork: its
first call raises `StoreError` saying to start the service after the fork.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from math import isfinite
from typing import Any, TypeVar, Unpack

from relay.errors import InvalidInputError, RelayError, ServiceStoppedError
from relay.health import Health
from relay.host import Host
from relay.logfields import fields, of_error
from relay.service import RelayService, ServiceOptions
from relay.threaded.host import SyncHost
from relay.threaded.runtime import Runtime

logger = logging.getLogger("relay.threaded")
T = TypeVar("T")

# Services of this process, for the fork hook; weak, so one the app dropped is not kept.
_LIVE: weakref.WeakSet[ThreadedRelayService] = weakref.WeakSet()
# A child's inherited runtimes: never used, never collected (their finalizers would touch the
# parent's sockets and files).
_ABANDONED: list[Runtime] = []


class ThreadedRelayService:
    """A blocking facade over one `RelayService` on an event loop of its own."""

    def __init__(
        self,
        store_url: str | None,
        host: SyncHost | Host,
        *,
        timeout: float = 30.0,
        host_threads: int = 4,
        **options: Unpack[ServiceOptions],
    ) -> None:
        """`store_url` as `open_store` takes it (None: `TALARIA_RELAY_STORE_URL`, else the
        embedded SQLite file); `options` are `RelayService`'s (`relay_url`, `owner`,
        `publishing=PublisherOptions(lease_s=…)`, …)."""
        self.timeout = _seconds(timeout)
        if type(host_threads) is not int or not 1 <= host_threads <= 64:
            raise InvalidInputError("host_threads must be an integer in 1..64")
        if "store" in options or "host" in options:
            raise InvalidInputError("pass the store as a URL and the host positionally")
        self._runtime_for_here = functools.partial(Runtime, store_url, host, host_threads, options)
        self._lock = threading.Lock()
        self._runtime: Runtime | None = None
        self._stopped = False
        self._started = False  # start() was called: a forked child starts again
        _LIVE.add(self)

    def start(self, *, timeout: float | None = None) -> bool:
        """Resume from stored state (`RelayService.start`): True when a publisher runs."""
        self._started = True
        return self._call("start", lambda s: s.start(), timeout)

    def pair(
        self, body: object, profile: str, *, operator: bool, timeout: float | None = None
    ) -> dict[str, Any]:
        """`POST /api/talaria/relay/pair`: register the server, or enroll another profile;
        `operator` (required) as `RelayService.pair`."""
        return self._call("pair", lambda s: s.pair(body, profile, operator=operator), timeout)

    def update_presence(
        self, body: object, profile: str, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """`POST /api/talaria/presence`."""
        return self._call("update_presence", lambda s: s.update_presence(body, profile), timeout)

    def mark_viewed(self, session_id: str, *, timeout: float | None = None) -> None:
        """A viewed session clears its finished runs on the relay."""
        self._call("mark_viewed", lambda s: s.mark_viewed(session_id), timeout)

    def clear_deleted(
        self, session_id: str, profile: str | None, *, timeout: float | None = None
    ) -> None:
        """Queue the acknowledgement of a deleted session's runs; call it before answering."""
        self._call("clear_deleted", lambda s: s.clear_deleted(session_id, profile), timeout)

    def unpair(self, *, if_relay_changed: bool = False, timeout: float | None = None) -> bool:
        """Forget the stored registration and its key (`RelayService.unpair`); whether one was.
        Like `start()` and `health()`, it does not start the service."""
        return self._call("unpair", lambda s: s.unpair(if_relay_changed=if_relay_changed), timeout)

    def profile_deleted(self, profile: str, *, timeout: float | None = None) -> None:
        """The web app deleted a profile: one recreated under its name is a new relay scope."""
        self._call("profile_deleted", lambda s: s.profile_deleted(profile), timeout)

    def note_terminal(self, stream_id: str, phase: str, *, timeout: float | None = None) -> None:
        """A turn ended: its outcome reaches the relay."""
        self._call("note_terminal", lambda s: s.note_terminal(stream_id, phase), timeout)

    def health(self, *, timeout: float | None = None) -> Health:
        """The store's answers and the publisher's loop; never calls the relay."""
        return self._call("health", lambda s: s.health(), timeout)

    def operator_facts(self, *, timeout: float | None = None) -> dict[str, Any]:
        """The operator page's document (`RelayService.operator_facts`)."""
        return self._call("operator_facts", lambda s: s.operator_facts(), timeout)

    def flush(self, *, timeout: float | None = None) -> None:
        """Return once a publishing pass that began after this call has finished."""
        self._call("flush", lambda s: s.flush(), timeout)

    def changed(self) -> None:
        """The web app's session list changed. Never blocks; before first use, nothing."""
        runtime = self._runtime
        if runtime is None or self._stopped or runtime.pid != os.getpid():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: stopping
            runtime.loop.call_soon_threadsafe(runtime.changed)

    @property
    def owner(self) -> str | None:
        """This process's claim owner in the store, once the service is open."""
        runtime = self._runtime
        service = runtime.service if runtime is not None else None
        return service.owner if service is not None else None

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the publisher, close the store, end the thread: once, within about `timeout`.
        Calls in flight raise `ServiceStoppedError`; so does every call after it."""
        runtime = self._runtime
        if runtime is not None and threading.current_thread() is runtime.thread:
            raise RelayError("stop() from the relay's own loop would deadlock")
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            runtime, self._runtime = self._runtime, None
        atexit.unregister(self.stop)
        if runtime is not None and runtime.pid == os.getpid():
            took = runtime.shutdown(timeout)
            facts = fields("threaded_stopped")
            logger.debug("[relay] threaded relay service stopped in %.2fs", took, extra=facts)

    def __enter__(self) -> ThreadedRelayService:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _runtime_here(self) -> Runtime:
        with self._lock:
            if self._stopped:
                raise ServiceStoppedError()
            if self._runtime is None or self._runtime.pid != os.getpid():
                if self._runtime is not None:  # forked without our hook (it always runs)
                    _ABANDONED.append(self._runtime)
                self._runtime = self._runtime_for_here()
                # The app may forget to stop it; a daemon thread would die mid-transaction.
                atexit.register(self.stop)
            return self._runtime

    def _call(
        self, name: str, action: Callable[[RelayService], Awaitable[T]], timeout: float | None
    ) -> T:
        wait = _seconds(self.timeout if timeout is None else timeout)
        if name in ("start", "health", "unpair"):
            return self._runtime_here().call(name, action, wait)
        # The thread starts on first use, and the service with it: a threaded app that forgot
        # `start()` publishes from its first call on (the async service raises).
        self._started = True

        async def started_first(service: RelayService) -> T:
            if not service.started:
                await service.start()
            return await action(service)

        return self._runtime_here().call(name, started_first, wait)

    def _after_fork(self) -> None:
        """In a forked child: the parent's runtime is not ours; make one here, lazily or now."""
        self._lock = threading.Lock()  # it may have been held by a thread that is not here
        runtime, self._runtime = self._runtime, None
        if runtime is None:
            return
        _ABANDONED.append(runtime)
        if self._started and not self._stopped:
            # Started in the parent, so started here: the child publishes its own sessions.
            self._runtime_here().boot(lambda s: s.start()).add_done_callback(_report_restart)


def _report_restart(answer: Future[bool]) -> None:
    if (error := answer.exception()) is not None:
        logger.warning(
            "[relay] the threaded relay service did not restart after fork: %s",
            error,
            extra=of_error("fork_restart_failed", error),
        )


def _seconds(timeout: float) -> float:
    if not isinstance(timeout, int | float) or not isfinite(timeout) or timeout <= 0:
        raise InvalidInputError("timeout must be a positive number of seconds")
    return float(timeout)


def _after_fork_in_child() -> None:
    for service in list(_LIVE):
        try:
            service._after_fork()
        except Exception:  # a child must come up even if one service cannot
            logger.exception(
                "[relay] restarting the threaded relay service after fork failed",
                extra=fields("fork_restart_failed"),
            )


os.register_at_fork(after_in_child=_after_fork_in_child)
