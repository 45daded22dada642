"""The relay's input rules, ported from its TypeScript: what a field must be before it is accepted.

The relay runs on JavaScript, so lengths count UTF-16 code units, `trim()` strips JavaScript's
whitespace set, numbers have no int/float distinction, and origins are canonicalised the way
`new URL(x).origin` does. These helpers reproduce that, so the dev relay accepts and refuses
exactly what the real one does.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import math
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

from relay.protocol import (
    JS_WHITESPACE,
    MAX_ID,
    MAX_SAFE_INTEGER,
    MAX_SNAPSHOT_STATES,
    MAX_TITLE,
    PHASES,
)

MAX_BODY_CHARS = 512 * 1024
ROUTES = ("publisher_redeem", "profile_redeem", "snapshot", "viewed", "started")
STARTED_KEYS = ("eventId", "profileId", "publisherId", "sessionId", "startedAt", "version")

JsonObject = dict[str, Any]


def utf16_len(text: str) -> int:
    """`text.length` in JavaScript."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def body_text(body: bytes) -> str:
    """`await request.text()`: UTF-8 with a leading BOM dropped and bad bytes replaced."""
    return body.decode("utf-8-sig", errors="replace")


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # JSON.parse has no NaN or Infinity


def json_object(text: str) -> JsonObject | None:
    """`JSON.parse(text)` if it is a plain object, else None."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def js_number(value: object) -> int | float | None:
    """A finite JSON number as JavaScript holds it: integral values within the safe range as int."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer literal too large for a double is Infinity in JavaScript
        return None
    if not math.isfinite(number):
        return None
    if number.is_integer() and abs(number) <= MAX_SAFE_INTEGER:
        return int(number)
    return number


def safe_integer(value: object) -> int | None:
    """`Number.isSafeInteger(value)`, returning the integer."""
    number = js_number(value)
    return number if isinstance(number, int) else None


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_RADIX = re.compile(r"0([xXoObB])([0-9a-fA-F]+)")
_BASES = {"x": 16, "o": 8, "b": 2}


def header_integer(text: str) -> int | None:
    """`Number(text)` when it is an integer (the timestamp header), else None."""
    if match := _RADIX.fullmatch(text):
        try:
            return int(match[2], _BASES[match[1].lower()])
        except ValueError:
            return None
    number = float(text) if _DECIMAL.fullmatch(text) else math.nan
    return int(number) if math.isfinite(number) and number.is_integer() else None


def string_field(obj: JsonObject, key: str, maximum: int) -> str | None:
    """The trimmed string at `key` if it is 1..maximum UTF-16 units long, else None."""
    value = obj.get(key)
    if not isinstance(value, str):
        return None
    trimmed = value.strip(JS_WHITESPACE)
    return trimmed if 0 < utf16_len(trimmed) <= maximum else None


def b64url_decode(value: str) -> bytes:
    """The relay's lenient base64url decoder (re-pads; `+` and `/` pass too); ValueError if bad."""
    normalized = re.sub(r"[\t\n\f\r ]", "", value).replace("-", "+").replace("_", "/")
    padded = normalized + "=" * (-len(normalized) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except binascii.Error as exc:
        raise ValueError("invalid base64url") from exc


def path_parts(path: str) -> list[str]:
    """Non-empty segments, each `decodeURIComponent`-ed; [] if any cannot be decoded."""
    parts = []
    for segment in path.split("/"):
        if not segment:
            continue
        if re.search(r"%(?![0-9A-Fa-f]{2})", segment):
            return []
        try:
            parts.append(unquote_to_bytes(segment.encode("latin-1")).decode("utf-8"))
        except UnicodeError:
            return []
    return parts


def route_of(method: str, path: str) -> str | None:
    """Which publisher-facing route a request targets, by shape alone."""
    if method == "POST" and path == "/v1/pairings/publisher/redeem":
        return "publisher_redeem"
    if method == "POST" and path == "/v1/pairings/profile/redeem":
        return "profile_redeem"
    if method != "PUT" or not path.startswith("/v1/publishers/"):
        return None
    parts = path_parts(path)
    if len(parts) < 5 or parts[3] != "profiles":
        return None
    if len(parts) == 6 and parts[5] == "snapshot":
        return "snapshot"
    if len(parts) == 8 and parts[5] == "sessions" and parts[7] in ("viewed", "started"):
        return parts[7]
    return None


_DEFAULT_PORTS = {"http": "80", "https": "443"}
_C0_OR_SPACE = "".join(chr(c) for c in range(0x21))
_FORBIDDEN_HOST = re.compile(r"[\x00-\x20#%/:<>?@\[\\\]^|\x7f]")


def canonical_origin(value: str) -> str | None:
    """The origin of an http(s) URL with no credentials, path, query or fragment; else None.

    Follows the WHATWG URL parser: scheme and host lowercased, default port dropped, IDNA and
    numeric IPv4/IPv6 hosts serialised, backslashes and extra slashes accepted.
    """
    text = re.sub(r"[\t\n\r]", "", value.strip(_C0_OR_SPACE))
    match = re.fullmatch(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", text, re.DOTALL)
    if not match or match[1].lower() not in _DEFAULT_PORTS:
        return None
    scheme = match[1].lower()
    rest = match[2].replace("\\", "/").lstrip("/")
    end = re.search(r"[/?#]", rest)
    authority, tail = (rest[: end.start()], rest[end.start() :]) if end else (rest, "")
    userinfo, at, hostport = authority.rpartition("@")
    if at and userinfo not in ("", ":"):
        return None  # credentials; an empty user and password are no credentials
    if not re.fullmatch(r"/?\??#?", tail):
        return None  # a path other than `/`, or a query or fragment that is not empty
    if hostport.startswith("["):
        close = hostport.find("]")
        host = _ipv6(hostport[1:close]) if close > 0 else None
        port_text = hostport[close + 1 :]
        if port_text and not port_text.startswith(":"):
            return None
        port_text = port_text[1:]
    else:
        raw_host, _, port_text = hostport.partition(":")
        host = _domain(raw_host)
    if host is None or not re.fullmatch(r"[0-9]*", port_text):
        return None
    if port_text:
        if int(port_text) > 65535:
            return None
        port_text = str(int(port_text))
    suffix = "" if port_text in ("", _DEFAULT_PORTS[scheme]) else ":" + port_text
    return f"{scheme}://{host}{suffix}"


def _domain(raw: str) -> str | None:
    try:
        host = unquote_to_bytes(raw.encode("utf-8")).decode("utf-8")
    except UnicodeError:
        return None
    if not host:
        return None
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    host = host.lower()
    if _FORBIDDEN_HOST.search(host):
        return None
    labels = host.split(".")
    last = labels[-2] if labels[-1] == "" and len(labels) > 1 else labels[-1]
    if re.fullmatch(r"[0-9]+|0[xX][0-9a-fA-F]*", last):
        return _ipv4(labels)
    return host


def _ipv4(labels: list[str]) -> str | None:
    """WHATWG IPv4: 1 to 4 parts, each decimal, 0x-hex or 0-octal; the last fills what is left."""
    if labels[-1] == "":
        labels = labels[:-1]
    if not 1 <= len(labels) <= 4:
        return None
    numbers = []
    for label in labels:
        if re.fullmatch(r"0[xX][0-9a-fA-F]*", label):
            numbers.append(int(label[2:] or "0", 16))
        elif re.fullmatch(r"0[0-7]+", label):
            numbers.append(int(label, 8))
        elif re.fullmatch(r"[0-9]+", label):
            numbers.append(int(label))
        else:
            return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    address = last + sum(n * 256 ** (3 - i) for i, n in enumerate(head))
    return str(ipaddress.IPv4Address(address))


def _ipv6(text: str) -> str | None:
    if "%" in text:
        return None  # no zone identifiers in URLs
    try:
        packed = ipaddress.IPv6Address(text).packed
    except ValueError:
        return None
    text = ":".join(f"{int.from_bytes(packed[i : i + 2], 'big'):x}" for i in range(0, 16, 2))
    # The first longest run of two or more zero pieces becomes "::", as the URL serialiser does.
    runs = re.finditer(r"(?:^|:)0(?::0)+(?::|$)", text)
    if best := max(runs, key=lambda run: run[0].count("0"), default=None):
        text = text[: best.start()] + "::" + text[best.end() :]
    return f"[{text}]"


@dataclass(frozen=True, slots=True)
class StateInput:
    """One validated state of a snapshot, values trimmed as the relay stores them."""

    session_id: str
    stream_id: str | None
    event_id: str
    revision: int
    title: str
    phase: str
    updated_at: int | float
    deep_link: str
    alert_eligible: bool | None  # None: omitted, which means eligible


def parse_state(value: object) -> StateInput | None:
    if not isinstance(value, dict):
        return None
    stream_id = None
    if value.get("streamId") is not None:
        stream_id = string_field(value, "streamId", MAX_ID)
        if stream_id is None:
            return None
    session_id = string_field(value, "sessionId", MAX_ID)
    event_id = string_field(value, "eventId", MAX_ID)
    revision = safe_integer(value.get("revision"))
    title = string_field(value, "title", MAX_TITLE)
    phase = value.get("phase")
    updated_at = js_number(value.get("updatedAt"))
    deep_link = string_field(value, "deepLink", 512)
    alert_eligible = value.get("alertEligible")
    if (
        ("alertEligible" in value and not isinstance(alert_eligible, bool))
        or session_id is None
        or event_id is None
        or revision is None
        or revision < 0
        or title is None
        or not isinstance(phase, str)
        or phase not in PHASES
        or updated_at is None
        or deep_link is None
        or not deep_link.startswith("/")
        or deep_link.startswith("//")
    ):
        return None
    return StateInput(
        session_id, stream_id, event_id, revision, title, phase, updated_at, deep_link,
        alert_eligible if isinstance(alert_eligible, bool) else None,
    )  # fmt: skip


def parse_snapshot(body: JsonObject) -> list[StateInput] | None:
    """The states of a valid snapshot body, else None (`invalid_snapshot`)."""
    raw = body.get("states")
    if string_field(body, "snapshotId", MAX_ID) is None or not isinstance(raw, list):
        return None
    if len(raw) > MAX_SNAPSHOT_STATES:
        return None
    states = [parse_state(state) for state in raw]
    return None if any(state is None for state in states) else [s for s in states if s]


@dataclass(frozen=True, slots=True)
class StartedInput:
    event_id: str
    publisher_id: str
    profile_id: str
    session_id: str
    started_at: int


def parse_started(body: JsonObject) -> StartedInput | None:
    """Exactly the v1 fields, each bounded: an extra field is refused, not ignored."""
    version = body.get("version")
    if tuple(sorted(body)) != STARTED_KEYS or js_number(version) != 1:
        return None
    event_id = string_field(body, "eventId", 200)
    publisher_id = canonical_origin(string_field(body, "publisherId", MAX_ID) or "")
    profile_id = string_field(body, "profileId", 128)
    session_id = string_field(body, "sessionId", MAX_ID)
    started_at = safe_integer(body.get("startedAt"))
    if not (event_id and publisher_id and profile_id and session_id):
        return None
    if started_at is None or started_at < 0:
        return None
    return StartedInput(event_id, publisher_id, profile_id, session_id, started_at)
