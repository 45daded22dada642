"""The checks every value passes on its way into the store (and every record on its way out):
each returns the value it checked, or raises `InvalidInputError` saying what was wrong.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any, TypeVar

from relay.errors import CorruptStateError, InvalidInputError, RelayError
from relay.protocol import MAX_SAFE_INTEGER, validated_origin

T = TypeVar("T")

MAX_TEXT = 4096
# More than any caller needs in one call; keeps a runaway count from exhausting memory.
MAX_BATCH = 100_000
IDENTITY_PATTERN = re.compile(r"pfi_[0-9a-f]{32}")


def text(kind: str, value: object, limit: int = MAX_TEXT) -> str:
    """A non-empty string of at most `limit` characters, without NUL or lone surrogates."""
    if type(value) is not str or not 0 < len(value) <= limit:
        raise InvalidInputError(f"{kind} must be a non-empty string of at most {limit} characters")
    if value.isascii() and "\x00" not in value:
        return value  # the common case, without a call to `storable`
    if not storable(value):
        raise InvalidInputError(f"{kind} must not contain NUL or unpaired surrogates")
    return value


def optional_text(kind: str, value: object, limit: int = MAX_TEXT) -> str | None:
    return None if value is None else text(kind, value, limit)


def storable(value: str) -> bool:
    """Whether `value` has no NUL and no lone surrogate (every store, and UTF-8, can keep it)."""
    if "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def safe_int(kind: str, value: object, minimum: int = 0) -> int:
    """An integer (not a bool) in `minimum`..2^53-1, the range JSON carries exactly."""
    if type(value) is not int or not minimum <= value <= MAX_SAFE_INTEGER:
        raise InvalidInputError(f"{kind} must be an integer in {minimum}..2^53-1")
    return value


def int64(kind: str, value: object) -> int:
    """A non-negative integer a BIGINT column holds, for values that never go on the wire."""
    if type(value) is not int or not 0 <= value <= 2**63 - 1:
        raise InvalidInputError(f"{kind} must be an integer in 0..2^63-1")
    return value


def time_ms(kind: str, value: object) -> int:
    """A millisecond time or duration: a non-negative safe integer."""
    return safe_int(kind, value)


def optional_int(kind: str, value: object, minimum: int = 0) -> int | None:
    return None if value is None else safe_int(kind, value, minimum)


def flag(kind: str, value: object) -> bool:
    if type(value) is not bool:
        raise InvalidInputError(f"{kind} must be a boolean")
    return value


def origin(kind: str, value: object) -> str:
    """A bare http(s) origin, as `validated_origin` accepts it."""
    try:
        validated_origin(text(kind, value))
    except RelayError:
        raise InvalidInputError(f"{kind} must be an HTTP(S) origin") from None
    return str(value)


def identity(kind: str, value: object) -> str:
    if type(value) is not str or IDENTITY_PATTERN.fullmatch(value) is None:
        raise InvalidInputError(f"{kind} must be a pfi_<32 hex> identity")
    return value


def is_identity(value: object) -> bool:
    return type(value) is str and IDENTITY_PATTERN.fullmatch(value) is not None


def instance(kind: str, value: object, cls: type[T]) -> T:
    if not isinstance(value, cls):
        raise InvalidInputError(f"{kind} must be a {cls.__name__}")
    return value


def items(kind: str, value: object, limit: int | None = MAX_BATCH) -> list[Any]:
    """The members of an iterable that is not a string, bytes or mapping, at most `limit`."""
    if isinstance(value, list | tuple) and (limit is None or len(value) <= limit):
        return list(value)  # the common case, measured rather than counted member by member
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        raise InvalidInputError(f"{kind} must be an iterable of values, not {type(value).__name__}")
    members = list(value if limit is None else itertools.islice(value, limit + 1))
    if limit is not None and len(members) > limit:
        raise InvalidInputError(f"{kind} may hold at most {limit} values")
    return members


def members(kind: str, value: object, each: str, cls: type[T]) -> tuple[T, ...]:
    """The members of an iterable (`items`, unbounded), each a `cls` (`each` names one)."""
    found = tuple(items(kind, value, None))
    for member in found:
        instance(each, member, cls)
    return found


def mapping(kind: str, value: object, limit: int | None = MAX_BATCH) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{kind} must be a mapping, not {type(value).__name__}")
    if limit is not None and len(value) > limit:
        raise InvalidInputError(f"{kind} may hold at most {limit} values")
    return value


def until(kind: str, now_ms: int, duration_ms: int) -> int:
    if now_ms + duration_ms > MAX_SAFE_INTEGER:
        raise InvalidInputError(f"{kind} ends past 2^53-1 ms")
    return now_ms + duration_ms


async def read(what: str, hook: Awaitable[T]) -> T:
    """What `hook` read; a record it could not build is corrupt stored state."""
    try:
        return await hook
    except InvalidInputError as error:
        raise CorruptStateError(f"stored {what} is invalid: {error}") from None
