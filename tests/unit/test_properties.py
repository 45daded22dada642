"""Properties of the pure helpers: origins, titles, the signed string and the legacy JSON codecs.

Each test states a rule for every input Hypothesis can find, not for a table of cases; the
example tables of the same helpers are in tests/unit/test_protocol.py and
tests/store/test_files_layout.py.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import sys
import unicodedata
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from strategies import (
    DOCUMENTS,
    any_text,
    deleted_views,
    field_text,
    identities,
    origins,
    presence_leases,
    relay_configs,
    started_scopes,
    times,
)

from relay.errors import CorruptStateError, InvalidInputError
from relay.protocol import MAX_TITLE, canonical_string, capped_title, validated_origin
from relay.store import DeletedView, PresenceLease, RelayConfig, StartedScope
from relay.store.files import documents
from relay.testing.devrelay.validation import utf16_len

# ── validated_origin ──────────────────────────────────────────────────────────

# Text shaped like a URL reaches the checks past the scheme far more often than any text does.
url_like = st.builds(
    str.__add__,
    st.sampled_from(["https://", "http://", "HTTPS://", "ftp://", "https:", "//", ""]),
    st.text(st.sampled_from("aZ0.-_:@[]/\\?#% \t\n\x00é。") | st.characters(), max_size=30),
)


@given(st.one_of(any_text, url_like), st.booleans())
# Each of these was taken for an origin once (urlsplit reads a host that a browser would not).
@example("https://exa mple.com", False)
@example("https://relay.example\\@evil.example", False)
@example("HTTP://\x1b", False)
@example("https://ex%41mple.com", False)
@example("https://[v1.x]", False)
@example("http://¡", False)
def test_validated_origin_accepts_only_bare_origins_and_raises_nothing_else(
    raw: str, https_only: bool
) -> None:
    """On any text it returns or raises `InvalidInputError`; what it accepts is the input trimmed,
    accepted again unchanged, with no credentials, path, query or fragment; a URL parser (httpx's,
    WHATWG-like) reads an ASCII host as the same bare origin, and any other host has an ASCII
    (IDNA) form. httpx is no judge of non-ASCII hosts: it holds them to IDNA 2008, stricter than
    a browser's UTS 46 (`http://¡` is a host to a browser, not to httpx)."""
    try:
        origin = validated_origin(raw, https_only)
    except InvalidInputError:
        return
    assert origin == raw.strip().rstrip("/")
    assert validated_origin(origin, https_only) == origin
    parsed = urlsplit(origin)
    assert parsed.scheme in (("https",) if https_only else ("http", "https"))
    assert parsed.hostname
    assert (parsed.username, parsed.password, parsed.query, parsed.fragment) == (None, None, "", "")
    assert parsed.path in ("", "/")
    if not parsed.hostname.isascii():
        parsed.hostname.encode("idna")
        return
    url = httpx.URL(origin + "/v1/x")
    assert (url.scheme, url.userinfo, url.raw_path, url.query, url.fragment) == (
        parsed.scheme.lower(),
        b"",
        b"/v1/x",
        b"",
        "",
    )
    assert url.host == parsed.hostname.lower()


@given(origins(), st.text(" ", max_size=2), st.text("/", max_size=2), st.text(" ", max_size=2))
def test_validated_origin_returns_an_origin_as_typed(
    origin: str, before: str, slashes: str, after: str
) -> None:
    """A bare origin, with spaces around and trailing slashes, comes back trimmed, case kept."""
    assert validated_origin(before + origin + slashes + after) == origin


@given(
    origins(),
    st.sampled_from(["user@", "user:pw@", ":pw@", "@"]),
    st.sampled_from(["/{}", "?{}", "#{}", "/a/{}", "/./{}", "\\{}"]),
    st.text(st.characters(exclude_characters="/ \t\n\r\x0b\x0c"), min_size=1, max_size=8),
    st.booleans(),
)
@example("http://[::]", "@", "\\{}", "0", False)  # once taken for an origin
def test_validated_origin_refuses_credentials_paths_queries_and_fragments(
    origin: str, userinfo: str, suffix: str, word: str, credentials: bool
) -> None:
    """Credentials before the host, or a path, query or fragment after it: never an origin."""
    scheme, _, rest = origin.partition("://")
    raw = f"{scheme}://{userinfo}{rest}" if credentials else origin + suffix.format(word)
    assume(raw.strip().rstrip("/") != origin)
    with pytest.raises(InvalidInputError):
        validated_origin(raw)


# ── capped_title ──────────────────────────────────────────────────────────────


@functools.cache
def js_trimmed() -> str:
    """ECMAScript's WhiteSpace and LineTerminator, what `trim()` removes, derived here from
    Unicode rather than taken from `relay` (on first use: it reads every code point)."""
    spaces = (c for c in map(chr, range(sys.maxunicode + 1)) if unicodedata.category(c) == "Zs")
    return "\t\v\f\ufeff\n\r\u2028\u2029" + "".join(spaces)


def js_trim(text: str) -> str:
    return text.strip(js_trimmed())


@given(st.none() | any_text | st.text(max_size=200) | st.text("😀a \u3000\ufeff", max_size=130))
# Each of these was once sent as a title the relay refuses, or could not be sent at all.
@example(" " * 120 + "x")
@example("\ufeff")
@example("a\ud800b")
def test_capped_title_is_a_title_the_relay_takes(title: str | None) -> None:
    """Any title becomes one the relay accepts: 1..120 UTF-16 units once trimmed as JavaScript
    trims, valid UTF-8 (a lone surrogate replaced, never sent), never a surrogate pair cut."""
    capped = capped_title(title)
    assert 0 < utf16_len(js_trim(capped)) <= MAX_TITLE
    assert capped == js_trim(capped)
    capped.encode("utf-8")  # raises on a lone surrogate, or half of a cut pair


@given(st.text(max_size=200) | st.text("😀ab \u3000", max_size=130))
def test_capped_title_is_the_longest_prefix_that_fits(title: str) -> None:
    """A well-formed title is trimmed, then cut to its longest prefix of at most 120 UTF-16
    units; one that is blank once trimmed is "Untitled"."""
    trimmed = js_trim(title)
    capped = capped_title(title)
    if not trimmed:
        assert capped == "Untitled"
        return
    assert trimmed.startswith(capped)
    rest = trimmed[len(capped) :]
    assert not rest or utf16_len(capped + rest[0]) > MAX_TITLE


def test_capped_title_of_nothing_is_untitled() -> None:
    """No title at all is "Untitled", as upstream sends it."""
    assert capped_title(None) == capped_title("") == "Untitled"


# ── canonical_string ─────────────────────────────────────────────────────────

line = st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=40)
requests = st.tuples(st.sampled_from(["PUT", "POST", "GET"]), line, line, line, st.binary())


def body_digest(body: bytes) -> bytes:
    return base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=")


@given(requests)
def test_canonical_string_is_the_five_fields_joined_by_newlines(
    request: tuple[str, str, str, str, bytes],
) -> None:
    """Method, path, timestamp and nonce as UTF-8, then the body's unpadded base64url SHA-256,
    joined by LF with nothing after: the exact string the relay rebuilds."""
    method, path, timestamp, nonce, body = request
    signed = canonical_string(method, path, timestamp, nonce, body)
    fields = [method, path, timestamp, nonce]
    assert signed == b"\n".join([*(f.encode("utf-8") for f in fields), body_digest(body)])


@given(requests, requests)
def test_canonical_string_tells_requests_apart(
    one: tuple[str, str, str, str, bytes], other: tuple[str, str, str, str, bytes]
) -> None:
    """Two requests that differ in any field (none holding a newline) sign different strings."""
    assume(one != other)
    assert canonical_string(*one) != canonical_string(*other)


# ── the legacy JSON codecs ───────────────────────────────────────────────────


def parse_config(raw: bytes | None) -> RelayConfig | None:
    return None if raw is None else documents.parse_config(raw, 0)


PARSERS: dict[str, Callable[[bytes | None], Any]] = {
    documents.CONFIG: parse_config,
    documents.REVISION.name: documents.REVISION.parse,
    documents.STARTED.name: documents.STARTED.parse,
    documents.DELETED.name: documents.DELETED.parse,
    documents.PRESENCE.name: documents.PRESENCE.parse,
    documents.IDENTITIES.name: documents.IDENTITIES.parse,
    documents.PROFILE_ID_DOC.name: documents.PROFILE_ID_DOC.parse,
}


def parses_or_is_corrupt(name: str, raw: bytes) -> None:
    with contextlib.suppress(CorruptStateError):
        PARSERS[name](raw)


@pytest.mark.parametrize("name", sorted(PARSERS))
@given(raw=st.binary(max_size=200))
def test_every_codec_reads_any_bytes_or_calls_them_corrupt(name: str, raw: bytes) -> None:
    """Whatever bytes a state file holds, reading it gives a value or `CorruptStateError`."""
    parses_or_is_corrupt(name, raw)


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
@given(data=st.data())
def test_every_codec_reads_any_document_or_calls_it_corrupt(name: str, data: st.DataObject) -> None:
    """A JSON document shaped like the file's, with any field missing or of any value, reads as
    a value or raises `CorruptStateError`: never another exception."""
    document = data.draw(DOCUMENTS[name])
    parses_or_is_corrupt(name, json.dumps(document).encode())


@given(relay_configs)
def test_config_round_trips(config: RelayConfig) -> None:
    """A registration written as the Python original wrote it reads back equal."""
    assert documents.parse_config(documents.dump_config(config).encode(), 0) == config


@given(st.lists(started_scopes(), max_size=3, unique_by=lambda scope: scope.profile_id))
def test_started_ledger_round_trips(scopes: list[StartedScope]) -> None:
    """A started ledger, claims and all, reads back equal."""
    ledger = {scope.profile_id: scope for scope in scopes}
    text = documents.STARTED.dump(ledger)
    assert documents.STARTED.parse(text.encode()) == ledger


@given(st.lists(deleted_views, max_size=4, unique_by=lambda view: (view.session_id, view.profile)))
def test_deleted_outbox_round_trips(views: list[DeletedView]) -> None:
    """The deleted outbox reads back equal, in its order."""
    outbox = {(view.session_id, view.profile): view for view in views}
    parsed = documents.DELETED.parse(documents.DELETED.dump(outbox).encode())
    assert list(parsed.values()) == views


@given(st.lists(presence_leases, max_size=4, unique_by=lambda lease: (lease.profile, lease.tab_id)))
def test_presence_leases_round_trip(leases: list[PresenceLease]) -> None:
    """Presence leases read back equal."""
    by_tab = {(lease.profile, lease.tab_id): lease for lease in leases}
    assert documents.PRESENCE.parse(documents.PRESENCE.dump(by_tab).encode()) == by_tab


@given(st.dictionaries(field_text, identities, max_size=4))
def test_identities_round_trip(stored: dict[str, str]) -> None:
    """Profile identities read back equal."""
    assert documents.IDENTITIES.parse(documents.IDENTITIES.dump(stored).encode()) == stored


@given(identities)
def test_profile_identity_file_round_trips(identity: str) -> None:
    """A profile home's identity file reads back the identity written."""
    assert (
        documents.PROFILE_ID_DOC.parse(documents.PROFILE_ID_DOC.dump(identity).encode()) == identity
    )


@given(times)
def test_revision_file_round_trips(floor: int) -> None:
    """The revision floor reads back as written."""
    assert documents.REVISION.parse(documents.REVISION.dump(floor).encode()) == floor
