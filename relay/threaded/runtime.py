"""`Runtime`: one event loop in one daemon thread, the store and the `RelayService` it runs.

Blocking callers wait on a future of their own, settled whatever happens to the loop: with the
answer, the service's own error, or `ServiceStoppedError`. After `fork()` a child abandons its
parent's runtime unread (its sockets and files are the parent's) and makes its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import Any, TypeVar, cast

from relay.errors import CallTimeoutError, RelayError, ServiceStoppedError
from relay.host import Host
from relay.logfields import fields, of_error
from relay.service import RelayService, ServiceOptions
from relay.store import open_store
from relay.threaded.host import OffLoopHost, SyncHost

logger = logging.getLogger("relay.threaded")
T = TypeVar("T")


class Runtime:
    """The loop thread, the host's thread pool, and the service, opened on first use."""

    def __init__(
        self, url: str | None, host: SyncHost | Host, host_threads: int, options: ServiceOptions
    ) -> None:
        self.pid = os.getpid()
        self._url = url
        self._options = options
        self.loop = asyncio.new_event_loop()
        self.pool = ThreadPoolExecutor(host_threads, thread_name_prefix="relay-host")
        # An async Host (its I/O methods are coroutine functions) is used as it is; a SyncHost
        # is called on the pool.
        async_host = inspect.iscoroutinefunction(getattr(host, "active_runs", None))
        self.host = cast(Host, host) if async_host else OffLoopHost(cast(SyncHost, host), self.pool)
        self.service: RelayService | None = None
        self._opening = asyncio.Lock()
        self._calls: set[asyncio.Task[Any]] = set()
        # Set but while a restart after fork runs: calls wait for it, so they see its publisher.
        self._booted = asyncio.Event()
        self._booted.set()
        # Every caller's future not yet settled, so a stop can settle them all.
        self._waiting: set[Future[Any]] = set()
        self._waiting_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="relay-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            try:
                left = asyncio.all_tasks(self.loop)
                for task in left:
                    task.cancel()
                if left:
                    self.loop.run_until_complete(asyncio.wait(left, timeout=1.0))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()
                # Idle host threads end at once; one stuck in a host call ends when the call
                # returns, and a stop does not wait for it.
                self.pool.shutdown(wait=False, cancel_futures=True)

    async def opened(self) -> RelayService:
        """The service, its store opened on first use (a failed open is tried again next time)."""
        if self.service is None:
            async with self._opening:
                if self.service is None:
                    store = await open_store(self._url)
                    try:
                        self.service = RelayService(store, self.host, **self._options)
                    except BaseException:
                        await store.close()
                        raise
        return self.service

    def changed(self) -> None:
        if self.service is not None and self.service.started:
            self.service.changed()

    def boot(self, action: Callable[[RelayService], Awaitable[T]]) -> Future[T]:
        """Run `action` before any call (a restart after fork); its answer."""
        self._booted.clear()  # no call is waiting yet: the loop has just been made
        answer, _ = self.submit("start", action, booting=True)
        return answer

    def submit(
        self, name: str, action: Callable[[RelayService], Awaitable[T]], *, booting: bool = False
    ) -> tuple[Future[T], Future[None]]:
        """Run `action(service)` on the loop: the answer, always settled, and the call's handle
        (cancel it to cancel the call)."""
        answer: Future[T] = Future()

        async def run() -> None:
            task = asyncio.current_task()
            assert task is not None
            self._calls.add(task)
            try:
                if not booting:
                    await self._booted.wait()
                _settle(answer, value=await action(await self.opened()))
            except asyncio.CancelledError:
                _settle(
                    answer, error=ServiceStoppedError(f"the relay service stopped during {name}")
                )
                raise
            except Exception as error:  # the service's own error, raised in the caller's thread
                _settle(answer, error=error)
            finally:
                self._calls.discard(task)
                if booting:
                    self._booted.set()

        with self._waiting_lock:
            self._waiting.add(answer)
        answer.add_done_callback(self._forget)
        try:
            handle = asyncio.run_coroutine_threadsafe(run(), self.loop)
        except RuntimeError:  # the loop is closed: stopped meanwhile
            _settle(answer, error=ServiceStoppedError())
            handle = Future()
        return answer, handle

    def call(self, name: str, action: Callable[[RelayService], Awaitable[T]], timeout: float) -> T:
        """`action(service)` on the loop, waited for here for at most `timeout` seconds."""
        if threading.current_thread() is self.thread:
            raise RelayError(f"{name}: a blocking call from the relay's own loop would deadlock")
        answer, handle = self.submit(name, action)
        try:
            return answer.result(timeout)
        except TimeoutError:
            if answer.done():  # the answer itself is a TimeoutError of the service's
                raise
            # Given up here, so cancelled there: a stuck call holds nothing for ever.
            _settle(answer, error=CallTimeoutError())
            handle.cancel()
            raise CallTimeoutError(f"{name} took longer than {timeout:g}s") from None

    def _forget(self, answer: Future[Any]) -> None:
        with self._waiting_lock:
            self._waiting.discard(answer)

    def shutdown(self, timeout: float) -> float:
        """Stop the service, close the store, end the loop and its thread; seconds it took."""
        began = time.monotonic()

        async def close() -> None:
            for task in list(self._calls):
                task.cancel()
            await asyncio.gather(*self._calls, return_exceptions=True)
            if self.service is not None:
                try:
                    await self.service.stop()
                finally:
                    await self.service.store.close()

        try:
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout * 0.8)
        except TimeoutError:
            logger.warning(
                "[relay] the threaded relay service did not stop within %gs",
                timeout,
                extra=fields("threaded_stop_timeout"),
            )
        except Exception as error:  # a close that fails still ends the loop
            logger.warning(
                "[relay] stopping the threaded relay service failed: %s",
                error,
                extra=of_error("threaded_stop_failed", error),
            )
        with contextlib.suppress(RuntimeError):  # already closed
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(max(timeout - (time.monotonic() - began), 0.1))
        with self._waiting_lock:
            waiting, self._waiting = list(self._waiting), set()
        for answer in waiting:
            _settle(answer, error=ServiceStoppedError("the relay service stopped"))
        return time.monotonic() - began


def _settle(
    answer: Future[Any], *, value: object = None, error: BaseException | None = None
) -> None:
    """Settle `answer` unless a stop or a timeout settled it first."""
    with contextlib.suppress(InvalidStateError):
        if error is None:
            answer.set_result(value)
        else:
            answer.set_exception(error)
