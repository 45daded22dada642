"""Hypothesis strategies of the property tests: origins, texts, records and JSON documents."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from relay.protocol import MAX_SAFE_INTEGER
from relay.store import (
    DeletedScope,
    DeletedView,
    PresenceLease,
    ProfileGrant,
    RelayConfig,
    StartedEntry,
    StartedScope,
)

# ── text ──────────────────────────────────────────────────────────────────────

# Lone surrogates are rare in `st.text()`; a host may still hand one over (a title read with
# `surrogateescape`), so some strategies mix them in on purpose.
SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ANY_CHAR = st.one_of(st.characters(exclude_categories=()), SURROGATE)
any_text = st.text(ANY_CHAR, max_size=40)


def store_text(max_size: int) -> st.SearchStrategy[str]:
    """Text a store accepts: non-empty, no NUL, no lone surrogates (not UTF-8 encodable)."""
    return st.text(
        st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=max_size
    )


field_text = store_text(24)
times = st.integers(0, MAX_SAFE_INTEGER)

# ── origins ───────────────────────────────────────────────────────────────────

_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
domains = st.lists(_label, min_size=1, max_size=3).map(".".join)
ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(lambda address: f"[{address}]")
hosts = st.one_of(domains, domains.map(str.upper), ipv4, ipv6)


@st.composite
def origins(draw: st.DrawFn, schemes: tuple[str, ...] = ("http", "https")) -> str:
    """A bare origin: scheme, host and maybe a port, as a person might type it."""
    scheme = draw(st.sampled_from(schemes))
    port = draw(st.none() | st.integers(1, 65535))
    return f"{scheme}://{draw(hosts)}" + ("" if port is None else f":{port}")


# ── records, as a store holds them ────────────────────────────────────────────

identities = st.from_regex(r"pfi_[0-9a-f]{32}", fullmatch=True)


@st.composite
def started_scopes(draw: st.DrawFn) -> StartedScope:
    """A scope's ledger as the store writes it: entries oldest first, each session once, a
    claim always a holder and an end."""
    profile_id = draw(field_text)
    sessions = draw(st.lists(field_text, max_size=4, unique=True))
    entries = []
    for session_id in sessions:
        claim = draw(st.none() | st.tuples(field_text, times))
        claimed_by, claimed_until = claim if claim is not None else (None, None)
        started_at, sent = draw(times), draw(st.booleans())
        entries.append(
            StartedEntry(profile_id, session_id, started_at, sent, claimed_by, claimed_until)
        )
    entries.sort(key=lambda e: (e.started_at, e.session_id))
    return StartedScope(profile_id, draw(times), tuple(entries))


deleted_scopes = st.builds(DeletedScope, origins(), origins(), field_text)
deleted_views = st.builds(
    DeletedView,
    store_text(64),
    field_text,
    field_text,
    times,
    st.none() | field_text,
    st.none() | deleted_scopes,
)
presence_leases = st.builds(
    PresenceLease,
    field_text,
    store_text(64),
    times,
    st.booleans(),
    times,
    times,
)
relay_configs = st.builds(
    RelayConfig,
    origins(),
    origins(),
    field_text,
    field_text,
    st.dictionaries(field_text, st.builds(ProfileGrant, field_text, field_text), min_size=1),
)

# ── JSON documents, valid or not ──────────────────────────────────────────────

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    any_text,
    st.text(max_size=300),  # past the limits of ids and titles
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


ints = st.one_of(times, st.integers(-(2**64), 2**64))
# Past every limit of ids (191), tab ids (64) and view ids (64).
long_text = st.integers(60, 300).map(lambda n: "x" * n)
texts = st.one_of(field_text, any_text, long_text)


def near(keys: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with these keys: each present with a value of its kind (in its limits or not),
    or any of them missing or of any JSON value instead."""
    loose = {key: st.one_of(value, json_scalars) for key, value in keys.items()}
    return st.fixed_dictionaries(keys) | st.fixed_dictionaries({}, optional=loose)


def versioned(key: str, items: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A legacy document: `{"version": 1, key: items}`, its parts sometimes wrong."""
    return near({"version": st.just(1), key: items})


_grant = near({"identity": texts, "profile_id": texts})
_scope = near({"url": origins() | texts, "publisherId": origins() | texts, "profileId": texts})
_session = near(
    {
        "sessionId": texts,
        "startedAt": ints,
        "sent": st.booleans(),
        "claimedBy": texts,
        "claimedUntil": ints,
    }
)
# Each legacy file's document, by the file's name.
DOCUMENTS: dict[str, st.SearchStrategy[Any]] = {
    "talaria-relay.json": near(
        {
            "key_id": texts,
            "private_key_path": texts,
            "profiles": st.dictionaries(texts, _grant, max_size=3),
            "publisher_id": origins() | texts,
            "url": origins() | texts,
            "version": st.just(2),
        }
    ),
    "talaria-relay-started.json": versioned(
        "profiles",
        st.lists(
            near({"profileId": texts, "floor": ints, "sessions": st.lists(_session, max_size=3)}),
            max_size=3,
        ),
    ),
    "talaria-relay-deleted.json": versioned(
        "views",
        st.lists(
            near(
                {
                    "id": texts,
                    "sessionId": texts,
                    "profile": texts,
                    "through": ints,
                    "identity": st.none() | texts,
                    "scope": _scope,
                }
            ),
            max_size=3,
        ),
    ),
    "talaria-relay-presence.json": versioned(
        "leases",
        st.lists(
            near(
                {
                    "profile": texts,
                    "tabId": texts,
                    "seq": ints,
                    "active": st.booleans(),
                    "expiresAt": ints,
                    "updatedAt": ints,
                }
            ),
            max_size=3,
        ),
    ),
    "talaria-relay-identities.json": versioned(
        "identities", st.dictionaries(texts, identities | texts, max_size=3)
    ),
}
