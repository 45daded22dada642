"""The `[relay]` lines: to the web app's own `log` callable when it passes one (as upstream),
else to a `logging.Logger` under `relay`, with levels. A traceback cannot travel through a
callable of lines, so a record that carries one always reaches the logger as well."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from relay import metrics
from relay.errors import RelayHttpError, RelayRequestError
from relay.logfields import Facts, fields, of_error

Log = Callable[[str], None]
# A signed PUT to the relay under the publisher's current key.
Put = Callable[[str, bytes], Awaitable[None]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Reporter:
    """Sends each line to `log` if given, else to `logger` at its level, with its facts as
    `extra` fields (`relay.logfields`) and the replica's `owner` among them."""

    log: Log | None
    logger: logging.Logger
    owner: str | None = None

    def info(self, line: str, facts: Facts) -> None:
        self._emit(logging.INFO, line, facts)

    def warning(self, line: str, facts: Facts) -> None:
        self._emit(logging.WARNING, line, facts)

    def error(self, line: str, facts: Facts, *, error: BaseException | None = None) -> None:
        """An error; with `error`, its traceback too (for a bug, where the cause is the point)."""
        self._emit(logging.ERROR, line, facts, error)

    def _emit(
        self, level: int, line: str, facts: Facts, error: BaseException | None = None
    ) -> None:
        if self.log is not None:
            self.log(line)
        if self.log is None or error is not None:
            extra = dict(facts)
            if self.owner is not None:
                extra["relay_owner"] = self.owner
            self.logger.log(level, line, exc_info=error, extra=extra)


def cause(error: BaseException) -> str:
    """`Type: message`, what a line says of an exception it did not expect."""
    return f"{type(error).__name__}: {error}"


class Swallowed:
    """Host calls a pass survives the failure of: each kind is warned of once, not every pass,
    and anew after a pass in which it was called and never failed."""

    def __init__(self, report: Reporter) -> None:
        self._report = report
        self._failing: set[str] = set()
        self._failed: set[str] = set()
        self._succeeded: set[str] = set()

    async def call(
        self, kind: str, call: Callable[[], Awaitable[T]], fallback: T, consequence: str
    ) -> T:
        """`await call()`, or `fallback` when it raises; `consequence` says what that means."""
        try:
            result = await call()
        except Exception as error:  # the host's failure must not sink the pass; it is reported
            self._failed.add(kind)
            if kind not in self._failing:
                self._failing.add(kind)
                self._report.warning(
                    f"[relay] Host {kind} failed ({cause(error)}); {consequence}",
                    of_error("host_call_failed", error, kind=kind),
                )
            return fallback
        self._succeeded.add(kind)
        return result

    def settle(self) -> None:
        """End of a pass: a failing kind that only succeeded in it is reported as recovered."""
        for kind in sorted((self._failing & self._succeeded) - self._failed):
            self._failing.discard(kind)
            self._report.info(
                f"[relay] Host {kind} recovered", fields("host_call_recovered", kind=kind)
            )
        self._failed.clear()
        self._succeeded.clear()


@dataclass(eq=False, slots=True)
class Sender:
    """PUTs of one kind (`what`), counted under `metric`. A retryable failure raises, naming its
    profile; a permanent refusal is logged and counts as answered, a 404 (a relay older than the
    request: every later one would say the same) once, with what a relay `without_it` means."""

    put: Put
    report: Reporter
    metric: str
    what: str
    without_it: str
    _unsupported_logged: bool = field(default=False, init=False)

    async def __call__(self, path: str, body: bytes, profile: str) -> None:
        try:
            await self.put(path, body)
        except RelayRequestError as error:
            metrics.count(self.metric, error)
            if not isinstance(error, RelayHttpError) or error.retryable:
                error.profile = error.profile or profile
                raise
            status = error.status
        else:
            metrics.count(self.metric, None)
            return
        if status != 404:
            self.report.warning(
                f"[relay] Talaria relay rejected a {self.what} for profile {profile} "
                f"(HTTP {status})",
                fields("request_rejected", profile=profile, status=status, kind=self.what),
            )
        elif not self._unsupported_logged:
            self._unsupported_logged = True
            self.report.info(
                f"[relay] Talaria relay does not support {self.what}s (HTTP 404); "
                f"{self.without_it}",
                fields("request_unsupported", status=404, kind=self.what),
            )
