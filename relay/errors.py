"""The exceptions of `relay`, one tree.

    RelayError                      root: catch this to catch everything raised here
    ├── InvalidInputError           an argument is out of its domain; nothing was stored
    ├── StoreError                  relay state could not be read or written
    │   ├── CorruptStateError       a stored value exists but is invalid; it was left as it was
    │   ├── KeyPassphraseError      a stored key is encrypted and no passphrase, or a wrong one,
    │   │                           was given to open it; nothing changed
    │   ├── SchemaError             the database is not at the migration head
    │   ├── StaleConfigError        the registration changed since it was read; nothing was saved
    │   └── StoreUnavailableError   the database cannot be reached, or stayed busy
    ├── RelayPairingError           pairing failed: the `message` and `status` to answer with
    └── RelayRequestError           a request to the relay did not succeed
        ├── RelayHttpError          the relay answered non-2xx; `retryable` for 408, 425, 429, 5xx
        ├── RelayUnreachableError   no answer: connection failed
        │   └── RelayTimeoutError   no answer within the timeout
        └── RelayResponseError      an answer that could not be read (too large, not JSON)

Each class's docstring is its default message.
"""

from __future__ import annotations


class RelayError(Exception):
    """Talaria relay error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class InvalidInputError(RelayError, ValueError):
    """Invalid input."""


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


class RelayPairingError(RelayError):
    """Talaria Relay pairing failed."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class RelayRequestError(RelayError):
    """Could not reach Talaria Relay."""


class RelayHttpError(RelayRequestError):
    """Talaria relay returned an error status."""

    def __init__(self, status: int) -> None:
        super().__init__(f"Talaria relay returned HTTP {status}")
        self.status = status
        self.retryable = status in (408, 425, 429) or status >= 500


class RelayUnreachableError(RelayRequestError):
    """Could not reach Talaria Relay."""


class RelayTimeoutError(RelayUnreachableError):
    """Talaria Relay did not answer in time."""


class RelayResponseError(RelayRequestError):
    """Talaria Relay returned an invalid response."""
