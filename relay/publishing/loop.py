"""The coalescing loop: changes wake one pass, failures back off, nothing but a stop ends it.

The relay or the store failing (`RelayError`) is expected and gets one line; anything else is a
bug and gets its traceback. Both back off and try again; only a permanent HTTP answer stops the
loop for good.

A backoff holds (spec §1.5): the loop sleeps the whole delay, and a change meanwhile joins the
next pass (or a busy app would retry at its own event rate). Only `stop()` ends it early, and,
after a store that did not answer (`StoreUnavailableError`), the store's answer to a lease
renewal tried every second at most, so a replica back from a silent network publishes its rows'
true state at once (issue 33); a relay's failure or a store's refusal waits the whole delay.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, replace

from relay import metrics, tracing
from relay.errors import RelayError, RelayHttpError, StoreUnavailableError
from relay.logfields import fields, of_error
from relay.publishing.leases import DEFAULT_HEARTBEAT_S
from relay.publishing.logs import Reporter, cause

# No wait is longer: not the backoff, not what a relay's Retry-After asks for.
MAX_DELAY_S = 300.0
# How often a backoff after a silent store asks it again (a cheap lease renewal), at most.
STORE_RETRY_S = 1.0
# Passes remembered for the operator page's strip: an hour of a busy replica, a few KiB.
RECENT_PASSES = 720


@dataclass(frozen=True, slots=True)
class PassRecord:
    """One finished pass: when it ended (Unix seconds), `ok` or `failed`, and the backoff it
    started (until when), if any."""

    at: float
    outcome: str
    backoff_until: float | None = None


def backoff_delay(failures: int, uniform: Callable[[float, float], float]) -> float:
    """Seconds to wait after `failures` failures in a row: 5 s doubling, jittered, 300 s cap."""
    return min(5.0 * 2.0 ** min(failures - 1, 6) * uniform(0.8, 1.2), MAX_DELAY_S)


def retry_delay(
    failures: int, error: BaseException, uniform: Callable[[float, float], float]
) -> float:
    """The backoff, or longer when the relay asked (Retry-After, jittered upwards so replicas do
    not all come back at once); capped, so a bad header cannot park the publisher for hours."""
    delay = backoff_delay(failures, uniform)
    if isinstance(error, RelayHttpError) and error.retry_after is not None:
        delay = max(delay, error.retry_after * uniform(1.0, 1.2))
    return min(delay, MAX_DELAY_S)


@dataclass(frozen=True, slots=True)
class LoopHealth:
    """What the loop knows of its own health, in Unix seconds of the publisher's clock."""

    failures: int
    last_success: float | None
    backoff_until: float | None
    stopped: bool
    # The class of the failure that started the backoff, and its HTTP status if it was an
    # answer (None while no backoff holds).
    last_failure: str | None = None
    last_failure_status: int | None = None
    # When the last pass ended and how: `ok`, `backoff` (a failure to retry) or `stopped`.
    last_pass: float | None = None
    last_outcome: str | None = None
    # How long the pass in progress has run, in seconds (None: no pass runs now).
    pass_age_s: float | None = None


def _for(error: BaseException) -> str:
    """` for profile NAME` when the failure was one profile's request, else nothing."""
    profile = getattr(error, "profile", None)
    return f" for profile {profile}" if isinstance(profile, str) else ""


@dataclass(eq=False)
class PassLoop:
    """Runs `one_pass` when woken (changes coalesce) or on the heartbeat, one pass at a time."""

    one_pass: Callable[[], Awaitable[None]]
    _: KW_ONLY
    report: Reporter
    uniform: Callable[[float, float], float]
    # Renews the leases: seconds until another replica's lease ends (a pass may take its work
    # over), or None.
    poll: Callable[[], Awaitable[float | None]] | None = None
    poll_s: float = math.inf
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    clock: Callable[[], float] = time.time
    # Awaited with a failed pass's error, before its backoff's wait (the fleet row's write).
    on_backoff: Callable[[BaseException], Awaitable[None]] | None = None

    def __post_init__(self) -> None:
        # All but `stopped` and `pass_age_s`, which `health()` adds.
        self._health = LoopHealth(0, None, None, False)
        # When the pass in progress began, on the monotonic clock.
        self._pass_began: float | None = None
        self._backing_off = metrics.Gauge("backoff_active")
        self._begun = 0
        self._finished = 0
        self._progress = asyncio.Condition()
        self._dirty = False
        self.stopped = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._passing = asyncio.Lock()
        self._recent: collections.deque[PassRecord] = collections.deque(maxlen=RECENT_PASSES)
        # The last failure: after a store that did not answer, its backoff ends when it does.
        self._error: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def recent(self) -> tuple[PassRecord, ...]:
        """The last passes, oldest first (at most `RECENT_PASSES`)."""
        return tuple(self._recent)

    def health(self) -> LoopHealth:
        began = self._pass_began
        age = None if began is None else time.monotonic() - began
        return replace(self._health, stopped=self.stopped, pass_age_s=age)

    def start(self) -> None:
        """Run passes in the background until `stop()`."""
        if self._task is None and not self.stopped:
            self._task = asyncio.create_task(self._run(), name="talaria-relay-publisher")

    async def stop(self) -> None:
        self.stopped = True
        self._backing_off.clear()
        self._wake.set()
        async with self._progress:
            self._progress.notify_all()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def changed(self) -> None:
        """Something to publish: wake the loop (changes coalesce into one pass)."""
        self._dirty = True
        self._wake.set()

    async def flush(self) -> None:
        """Return once a pass that began after this call has finished (failed or not): during a
        backoff, the one after the delay (at most `MAX_DELAY_S` and one pass), or at `stop()`."""
        if self._task is None or self.stopped:
            if not self.stopped:
                await self.run_once()
            return
        target = self._begun + 1
        self.changed()
        async with self._progress:
            await self._progress.wait_for(lambda: self._finished >= target or self.stopped)

    async def run_once(self) -> float | None:
        """One pass, now; the seconds to back off for after a failure, else None."""
        async with self._passing:
            self._begun += 1
            start = time.perf_counter()
            self._pass_began = time.monotonic()
            delay = None
            try:
                with tracing.pass_span():
                    delay = await self._attempt()
            finally:
                self._pass_began = None
                outcome = "ok" if delay is None and not self.stopped else "failed"
                until = None if delay is None else self._health.backoff_until
                self._recent.append(PassRecord(self.clock(), outcome, until))
                ended = "stopped" if self.stopped else "ok" if delay is None else "backoff"
                self._health = replace(self._health, last_pass=self.clock(), last_outcome=ended)
                if (found := metrics.current()) is not None:
                    found.pass_duration.record(time.perf_counter() - start, {"outcome": outcome})
                self._finished += 1
                async with self._progress:
                    self._progress.notify_all()
        if delay is not None and self.on_backoff is not None and self._error is not None:
            # Once the pass is over and before the wait: whoever reads the fleet meanwhile
            # learns of the backoff in progress, not of the one before it.
            await self.on_backoff(self._error)
        return delay

    async def _attempt(self) -> float | None:
        try:
            await self.one_pass()
        except Exception as error:
            if not isinstance(error, RelayHttpError) or error.retryable:  # back off and retry
                return self._failed(error, bug=not isinstance(error, RelayError))
            self.report.error(
                f"[relay] Talaria relay publisher stopped after permanent HTTP {error.status}"
                + _for(error),
                of_error("publisher_stopped", error),
            )
            self.stopped = True
            self._backing_off.clear()
            tracing.annotate({"relay.outcome": "stopped"}, error)
            return None
        if self._health.failures:
            self.report.info(
                "[relay] Talaria relay snapshot recovered", fields("snapshot_recovered")
            )
        self._health = replace(
            self._health,
            failures=0,
            last_success=self.clock(),
            backoff_until=None,
            last_failure=None,
            last_failure_status=None,
        )
        self._backing_off.set(0)
        tracing.annotate({"relay.outcome": "ok"})
        return None

    def _failed(self, error: Exception, *, bug: bool = False) -> float:
        failures = self._health.failures + 1
        self._error = error
        delay = retry_delay(failures, error, self.uniform)
        self._health = replace(
            self._health,
            failures=failures,
            backoff_until=self.clock() + delay,
            last_failure=type(error).__name__,
            last_failure_status=error.status if isinstance(error, RelayHttpError) else None,
        )
        self._backing_off.set(1)
        tracing.annotate({"relay.outcome": "backoff", "relay.retry_in": delay}, error)
        state = "failed" if failures == 1 else "still failing"
        reason = cause(error) if bug else str(error)
        line = (
            f"[relay] Talaria relay snapshot {state}{_for(error)} ({reason}); "
            f"retrying in {delay:.1f}s"
        )
        if isinstance(error, RelayHttpError) and error.retry_after is not None:
            line += f" (Retry-After: {error.retry_after:.0f}s)"
        facts = of_error("snapshot_failed", error, retry_in=delay)
        if bug:
            self.report.error(line, facts, error=error)
        else:
            self.report.warning(line, facts)
        return delay

    async def _idle(self) -> None:
        """Wait for a change, the heartbeat, or the end of a lease another replica holds; every
        `poll_s` renew this replica's leases and learn when the next one of another ends."""
        clock = asyncio.get_running_loop().time
        beat_at = clock() + self.heartbeat_s
        takeover_at = math.inf
        while not self._dirty and not self.stopped:
            now = clock()
            if now >= min(beat_at, takeover_at):
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._wake.wait(), min(beat_at, takeover_at, now + self.poll_s) - now
                )
            self._wake.clear()
            if self.poll is None or self._dirty or clock() >= min(beat_at, takeover_at):
                continue
            try:
                due = await self.poll()
            except RelayError:
                continue  # the store is down: the heartbeat's pass reports it
            except Exception as error:
                self.report.error(
                    f"[relay] Talaria relay lease renewal failed ({cause(error)})",
                    of_error("lease_renewal_failed", error),
                    error=error,
                )
                continue
            takeover_at = math.inf if due is None else clock() + due

    async def _run(self) -> None:
        while not self.stopped:
            if not self._dirty:
                await self._idle()
            if self.stopped:
                return
            # A change from here on wakes the next sleep; one from before is in this pass.
            self._wake.clear()
            self._dirty = False
            delay = await self.run_once()
            if delay is not None:
                # Not a wait on `_wake`: a change must not cut the delay short; `stop()` cancels it.
                silent = isinstance(self._error, StoreUnavailableError)
                waiting = self._until_store_answers if silent else asyncio.sleep
                await waiting(delay)
                if not self.stopped:
                    self._dirty = True

    async def _until_store_answers(self, delay: float) -> None:
        """A backoff that ends early once the store answers a lease renewal (issue 33)."""
        clock = asyncio.get_running_loop().time
        ends = clock() + delay
        while self.poll is not None and not self.stopped and clock() < ends:
            await asyncio.sleep(min(self.poll_s, STORE_RETRY_S, ends - clock()))
            with contextlib.suppress(Exception):  # still silent (or failing): wait on
                await self.poll()
                return
        await asyncio.sleep(max(ends - clock(), 0.0))
