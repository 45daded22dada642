"""The exceptions of `relay`, one tree.

    RelayError                      root: catch this to catch everything raised here
    ├── InvalidInputError           an argument is out of its domain; nothing was stored
    └── StoreError                  relay state could not be read or written
        ├── CorruptStateError       a stored value exists but is invalid; it was left as it was
        ├── SchemaError             the database is not at the migration head
        └── StoreUnavailableError   the database cannot be reached, or stayed busy

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


class SchemaError(StoreError):
    """The relay database is not at the current schema revision."""


class StoreUnavailableError(StoreError):
    """The relay store cannot be reached."""
