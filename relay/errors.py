"""The exceptions of `relay`, one tree; each class's docstring is its default message.

    RelayError                      root: catch this to catch everything raised here
    ├── InvalidInputError           an argument is out of its domain; nothing was stored
    │   └── TransferConflictError   an import's target holds other relay state (use --force)
    ├── MissingExtraError           an optional dependency is missing: names the extra to install
    ├── SessionNotFoundError        the web app has no such session (also a `LookupError`)
    ├── StoreError                  relay state could not be read or written
    │   ├── CorruptStateError       a stored value exists but is invalid; it was left as it was
    │   ├── KeyPassphraseError      a stored key's passphrase is missing or wrong; nothing changed
    │   ├── SchemaError             the database is not at the migration head
    │   ├── StaleConfigError        the registration changed since it was read; nothing was saved
    │   └── StoreUnavailableError   the database cannot be reached, or stayed busy
    ├── RelayPairingError           pairing failed: the `message` and `status` to answer with
    ├── relay.routes.Refused        the web app's `identify` refused a request: its 4xx status
    ├── ServiceNotStartedError      a `RelayService` was used before `await service.start()`
    ├── ServiceStoppedError         a call to `relay.threaded` came after, or was cut by, `stop()`
    ├── CallTimeoutError            a call to `relay.threaded` timed out and was cancelled
    └── RelayRequestError           a request to the relay did not succeed
        ├── RelayHttpError          the relay answered non-2xx; `retryable` for 3xx, 408, 425, 429,
        │                           5xx and a 401 that the relay's clock explains
        ├── RelayUnreachableError   no answer: connection failed
        │   └── RelayTimeoutError   no answer within the timeout
        └── RelayResponseError      an answer that could not be read (too large, not JSON)

`MissingExtraError` is also an `ImportError`, `CallTimeoutError` a `TimeoutError`, and `Refused`
is `relay.asgi.Refused` and `relay.wsgi.Refused` too.
"""

from __future__ import annotations


class RelayError(Exception):
    """Talaria relay error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class InvalidInputError(RelayError, ValueError):
    """Invalid input."""


class MissingExtraError(RelayError, ImportError):
    """A part of relay needs an optional dependency that is not installed."""

    def __init__(self, what: str, module: str, extra: str) -> None:
        super().__init__(
            f"{what} needs {module}, which is not installed: pip install 'talaria-relay[{extra}]' "
            f"(from a checkout: pip install -e '.[{extra}]')"
        )
        self.name = module
        self.extra = extra


class TransferConflictError(InvalidInputError):
    """The target holds different relay state; copying over it needs --force."""


class SessionNotFoundError(RelayError, LookupError):
    """No such session."""


class StoreError(RelayError):
    """Relay state could not be read or written."""


class CorruptStateError(StoreError):
    """Stored relay state is invalid."""


class KeyPassphraseError(StoreError):
    """The publisher key is encrypted and the passphrase is missing or does not open it."""


class SchemaError(StoreError):
    """The relay database is not at the current schema revision."""


class StaleConfigError(StoreError):
    """The relay registration changed since it was read."""


class StoreUnavailableError(StoreError):
    """The relay store cannot be reached."""


class ServiceNotStartedError(RelayError):
    """The relay service is not started: call `await service.start()` first (in the web app's
    startup, or its lifespan), then use it."""


class ServiceStoppedError(RelayError):
    """The threaded relay service is stopped."""


class CallTimeoutError(RelayError, TimeoutError):
    """The threaded relay service did not answer in time."""


class RelayPairingError(RelayError):
    """Talaria Relay pairing failed."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class RelayRequestError(RelayError):
    """Could not reach Talaria Relay."""

    # The profile whose request failed, set by the publisher on the way out, for its log line.
    profile: str | None = None


class RelayHttpError(RelayRequestError):
    """Talaria relay returned an error status."""

    # `code`: the relay's `{"error": …}` code, if any; `retry_after`: the seconds its `Retry-After`
    # asked for, or None; `clock_skew`: on a 401 whose `Date` puts our clock outside the signature
    # window, our clock minus the relay's. A redirect (never followed) and such a 401 say nothing
    # against the request itself, so they are retried like a 5xx, not refused for good.
    def __init__(
        self,
        status: int,
        code: str | None = None,
        *,
        retry_after: float | None = None,
        clock_skew: float | None = None,
    ) -> None:
        # The message stays upstream's, word for word, but for what only we can tell.
        message = f"Talaria relay returned HTTP {status}"
        if 300 <= status < 400:
            message += " (a redirect, not followed)"
        if clock_skew is not None:
            direction = "ahead of" if clock_skew > 0 else "behind"
            message += (
                f": this server's clock is {abs(clock_skew):.0f}s {direction} the relay's, "
                "beyond the 300s a signature allows; check this server's clock (NTP)"
            )
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after = retry_after
        self.clock_skew = clock_skew
        self.retryable = (
            status in (408, 425, 429)
            or status >= 500
            or 300 <= status < 400
            or clock_skew is not None
        )


class RelayUnreachableError(RelayRequestError):
    """Could not reach Talaria Relay."""


class RelayTimeoutError(RelayUnreachableError):
    """Talaria Relay did not answer in time."""


class RelayResponseError(RelayRequestError):
    """Talaria Relay returned an invalid response."""
