"""Hypothesis strategies of the property tests: origins and texts."""

from __future__ import annotations

from hypothesis import strategies as st

from relay.protocol import MAX_SAFE_INTEGER

# ── text ──────────────────────────────────────────────────────────────────────

# Lone surrogates are rare in `st.text()`; a host may still hand one over (a title read with
# `surrogateescape`), so some strategies mix them in on purpose.
SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ANY_CHAR = st.one_of(st.characters(exclude_categories=()), SURROGATE)
any_text = st.text(ANY_CHAR, max_size=40)

# What a store accepts as text: non-empty, no NUL, no lone surrogates.
field_text = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=24
)
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
