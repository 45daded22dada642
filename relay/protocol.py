"""The Talaria Relay wire protocol: limits, origins, request signing and the exact bodies sent.

Bodies are built here as the bytes that are both signed and sent: compact JSON with the keys in
the order Talaria Web writes them, so a body equals the shared contract fixtures byte for byte.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from relay.errors import InvalidInputError

DEFAULT_RELAY_URL = "https://relay.talaria.kil.dev"
REQUEST_TIMEOUT_S = 10.0
PAIRING_RESPONSE_CAP = 256 * 1024
# The relay refuses (401) a signature whose timestamp is further than this from its own clock.
SIGNATURE_WINDOW_S = 5 * 60

PRESENCE_LEASE_MS = 90_000
# A tab's sequence fence outlives its lease, so a reloaded tab whose clock moved back recovers.
PRESENCE_FENCE_MS = 15 * 60_000
PRESENCE_MAX_TABS = 256
PRESENCE_TAB_PATTERN = re.compile(r"[A-Za-z0-9_-]{8,64}")

TERMINAL_RETENTION_S = 15 * 60
# Sessions started longer ago than this are never announced, which bounds the started ledger.
STARTED_WINDOW_MS = 24 * 60 * 60 * 1000
MAX_SNAPSHOT_STATES = 500
MAX_ID = 191  # sessionId, streamId, eventId, snapshotId
MAX_TITLE = 120  # UTF-16 code units, as the relay counts them
MAX_SAFE_INTEGER = 2**53 - 1

# What JavaScript's `String.prototype.trim` removes, as the relay trims every text field; Python's
# `str.strip()` differs at the edges (it keeps U+FEFF and strips U+001C..U+001F).
JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff" + "".join(
    chr(c) for c in range(0x2000, 0x200B)
)
# WHATWG's forbidden domain code points that `urlsplit` leaves inside a host name: a browser's
# URL parser (the relay's) refuses the host, or reads another one, where `urlsplit` reads this.
_NOT_IN_HOSTS = frozenset("<>\\^|%")

TERMINAL_PHASES = frozenset({"completed", "failed", "cancelled"})
PHASES = TERMINAL_PHASES | {
    "starting",
    "running",
    "waiting_for_approval",
    "waiting_for_input",
    "stale",
}


def validated_origin(raw: str, https_only: bool = False) -> str:
    """`raw` trimmed of spaces and trailing slashes if it is a bare http(s) origin; not
    lowercased: the saved string is compared with later input as typed."""
    value = raw.strip().rstrip("/")
    error = InvalidInputError(f"value must be an {'HTTPS' if https_only else 'HTTP(S)'} origin")
    # Spaces, controls, format characters and lone surrogates: `urlsplit` keeps them in the host
    # (or drops tabs and newlines) where a URL parser refuses them or reads another origin.
    if "?" in value or "#" in value or not all(c.isprintable() and c != " " for c in value):
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
        or not _is_host(parsed.hostname, bracketed=parsed.netloc.startswith("["))
        # `urlsplit` reads the host up to `]` and lets anything after it through, not only a port.
        or (parsed.netloc.startswith("[") and not _BRACKETED_NETLOC.fullmatch(parsed.netloc))
    ):
        raise error
    return value


_BRACKETED_NETLOC = re.compile(r"\[[^\]]*\](:[0-9]*)?")


def _is_host(host: str, *, bracketed: bool) -> bool:
    """Whether a URL parser reads `host` (lowercased by `urlsplit`) as the host it is."""
    if bracketed:  # an IPv6 literal; `urlsplit` lets a zone id or an IPvFuture form through
        with contextlib.suppress(ValueError):
            # A zone id (`%eth0`) is no host a browser reads.
            return ipaddress.IPv6Address(host).scope_id is None
        return False
    with contextlib.suppress(UnicodeError):
        host.encode("idna")  # a name that has no ASCII form names no host
        return _NOT_IN_HOSTS.isdisjoint(host)
    return False


def b64url(data: bytes) -> str:
    """Unpadded base64url, the relay's encoding for keys and signatures."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def canonical_string(method: str, path: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    """What a request's Ed25519 signature covers: the exact path and body bytes sent."""
    digest = b64url(hashlib.sha256(body).digest())
    return "\n".join((method, path, timestamp, nonce, digest)).encode("utf-8")


def encode_component(value: str) -> str:
    """JavaScript's `encodeURIComponent`, which leaves `!'()*` alone where `quote` would not."""
    return quote(value, safe="-_.!~*'()")


def publisher_path(publisher_id: str, profile_id: str, *rest: str) -> str:
    """`/v1/publishers/{pub}/profiles/{prf}/...` with each id encoded as one path segment."""
    publisher, profile = encode_component(publisher_id), encode_component(profile_id)
    return "/".join(("/v1/publishers", publisher, "profiles", profile, *rest))


def snapshot_path(publisher_id: str, profile_id: str) -> str:
    return publisher_path(publisher_id, profile_id, "snapshot")


def session_path(publisher_id: str, profile_id: str, session_id: str, action: str) -> str:
    """The `viewed` or `started` route of one session."""
    return publisher_path(
        publisher_id, profile_id, "sessions", encode_component(session_id), action
    )


def capped_title(title: str | None) -> str:
    """The title as the relay takes it: trimmed as JavaScript trims, "Untitled" if that leaves
    nothing, cut to 120 UTF-16 code units without splitting a surrogate pair. Trimmed first,
    since the relay trims what it gets and refuses a blank title: cut first, a long title of
    leading spaces would become one. A lone surrogate (no UTF-8 form) becomes U+FFFD."""
    text = title or ""
    if not text.isascii():
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    text = text.strip(JS_WHITESPACE) or "Untitled"
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > MAX_TITLE:
            return text[:index]
    return text


def compact(value: Any) -> bytes:
    """`JSON.stringify(value)` as UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True, slots=True)
class RelayState:
    """One session's row in a snapshot."""

    session_id: str
    stream_id: str | None
    revision: int
    title: str
    phase: str
    updated_at: int
    alert_eligible: bool = True

    @property
    def event_id(self) -> str:
        return f"snapshot:{self.revision}:{self.session_id}"

    def wire(self, *, with_eligibility: bool = True) -> dict[str, Any]:
        """The state as sent; `alertEligible` appears only as `false`, and only when supported."""
        state: dict[str, Any] = {
            "sessionId": self.session_id,
            "streamId": self.stream_id,
            "eventId": self.event_id,
            "revision": self.revision,
            "title": self.title,
            "phase": self.phase,
            "updatedAt": self.updated_at,
            "deepLink": "/sessions/" + encode_component(self.session_id),
        }
        if with_eligibility and not self.alert_eligible:
            state["alertEligible"] = False
        return state


def snapshot_body(
    snapshot_id: str, states: Sequence[RelayState], *, with_eligibility: bool = True
) -> bytes:
    wire = [state.wire(with_eligibility=with_eligibility) for state in states]
    return compact({"snapshotId": snapshot_id, "states": wire})


def started_body(publisher_id: str, profile_id: str, session_id: str, started_at: int) -> bytes:
    return compact(
        {
            "version": 1,
            "eventId": f"started:{session_id}",
            "publisherId": publisher_id,
            "profileId": profile_id,
            "sessionId": session_id,
            "startedAt": started_at,
        }
    )


def viewed_body(through: int) -> bytes:
    return compact({"through": through})
