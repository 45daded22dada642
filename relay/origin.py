"""Origin validation shared by the protocol and the stored registration."""

from __future__ import annotations

from urllib.parse import urlsplit

from relay.errors import InvalidInputError


def validated_origin(raw: str, https_only: bool = False) -> str:
    """Return `raw` trimmed of spaces and trailing slashes if it is a bare http(s) origin.

    The value is not lowercased: the relay compares the saved string with later input as typed.
    """
    value = raw.strip().rstrip("/")
    protocol = "HTTPS" if https_only else "HTTP(S)"
    error = InvalidInputError(f"value must be an {protocol} origin")
    if "?" in value or "#" in value:
        raise error
    try:
        parsed = urlsplit(value)
        parsed.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise error from None
    if (
        parsed.scheme not in (("https",) if https_only else ("http", "https"))
        or not parsed.hostname
        or parsed.username is not None
        or parsed.password is not None
        or parsed.path not in ("", "/")
    ):
        raise error
    return value
