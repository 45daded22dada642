"""The wire protocol's pure helpers: origins, path encoding, titles, the signed string and bodies.

Expected values are written out by hand (JavaScript's results where upstream is JavaScript), so a
helper that drifts from upstream fails here rather than at the relay.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.errors import InvalidInputError
from relay.protocol import (
    RelayState,
    canonical_string,
    capped_title,
    encode_component,
    session_path,
    snapshot_body,
    snapshot_path,
    started_body,
    validated_origin,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"
# base64url(SHA-256(b"")) without padding, computed independently of `relay`.
EMPTY_DIGEST = "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"


def fixture_bytes(name: str) -> bytes:
    """A pretty-printed contracts fixture as the compact bytes `JSON.stringify` would send."""
    value = json.loads((FIXTURES / name).read_text())
    return json.dumps(value, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://relay.example", "https://relay.example"),
        ("  https://relay.example//  ", "https://relay.example"),
        ("https://relay.example:8443/", "https://relay.example:8443"),
        ("HTTPS://Relay.Example", "HTTPS://Relay.Example"),
        ("https://[::1]:8443", "https://[::1]:8443"),
    ],
)
def test_validated_origin_trims_and_keeps_case(raw: str, expected: str) -> None:
    """A bare origin comes back trimmed of spaces and trailing slashes, in the case it was typed."""
    assert validated_origin(raw, https_only=True) == expected


def test_validated_origin_https_only_refuses_http() -> None:
    """Plain http passes for a publisher id but not where HTTPS is required (the relay URL)."""
    assert validated_origin("http://pub.example") == "http://pub.example"
    with pytest.raises(InvalidInputError, match="HTTPS origin"):
        validated_origin("http://pub.example", https_only=True)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "relay.example",
        "ftp://relay.example",
        "https://",
        "https:///path",
        "https://:443",
        "https://relay.example/path",
        "https://relay.example/./",
        "https://relay.example?",
        "https://relay.example?x=1",
        "https://relay.example#",
        "https://relay.example#top",
        "https://user@relay.example",
        "https://user:pw@relay.example",
        "https://:pw@relay.example",
        "https://relay.example:99999",
        "https://relay.example:port",
        # After an IPv6 literal's `]`, `urlsplit` lets anything through: only a port may follow.
        "https://[::1]a",
        "https://[::]\\0",
        "https://[::1]:80a",
        "https://[fe80::1%eth0]",
        "https://[fe80::1%25eth0]",
    ],
)
def test_validated_origin_rejects(raw: str) -> None:
    """Paths, queries, fragments, credentials, a missing host or a bad port are not origins."""
    with pytest.raises(InvalidInputError, match=r"HTTP\(S\) origin"):
        validated_origin(raw)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("!'()*", "!'()*"),
        ("~-_.", "~-_."),
        ("a b", "a%20b"),
        ("https://pub.example:8443/x", "https%3A%2F%2Fpub.example%3A8443%2Fx"),
        ("?#&=+,;$@[]%", "%3F%23%26%3D%2B%2C%3B%24%40%5B%5D%25"),
        ("é", "%C3%A9"),
        ("😀", "%F0%9F%98%80"),
        ("\u00a0\t", "%C2%A0%09"),
    ],
)
def test_encode_component_matches_encode_uri_component(value: str, expected: str) -> None:
    """`encode_component` gives what node's `encodeURIComponent` gives for the same input."""
    assert encode_component(value) == expected


def test_paths_encode_each_id_as_one_segment() -> None:
    """Ids with `/` and `:` stay one segment each, percent-encoded with uppercase hex."""
    assert snapshot_path("https://pub.example", "prf_x") == (
        "/v1/publishers/https%3A%2F%2Fpub.example/profiles/prf_x/snapshot"
    )
    assert session_path("https://pub.example", "prf/x", "s 1", "viewed") == (
        "/v1/publishers/https%3A%2F%2Fpub.example/profiles/prf%2Fx/sessions/s%201/viewed"
    )


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        (None, "Untitled"),
        ("", "Untitled"),
        ("a" * 120, "a" * 120),
        ("a" * 121, "a" * 120),
        ("é" * 130, "é" * 120),  # BMP characters count one unit each
        ("😀" * 60, "😀" * 60),  # astral characters count two: 60 of them is exactly 120
        ("😀" * 61, "😀" * 60),
        ("a" * 118 + "😀", "a" * 118 + "😀"),
        ("a" * 119 + "😀", "a" * 119),  # the pair would straddle the cap: dropped, not split
    ],
)
def test_capped_title_counts_utf16_units(title: str | None, expected: str) -> None:
    """Titles are capped at 120 UTF-16 code units and a surrogate pair is never cut in half."""
    assert capped_title(title) == expected


def test_canonical_string_layout() -> None:
    """Five LF-joined fields, no trailing newline, the body as unpadded base64url SHA-256."""
    signed = canonical_string("PUT", "/v1/a%2Fb", "1800000000", "n" * 32, b"")
    assert signed == f"PUT\n/v1/a%2Fb\n1800000000\n{'n' * 32}\n{EMPTY_DIGEST}".encode()
    digest = canonical_string("POST", "/", "0", "x", b'{"a":1}').split(b"\n")[-1]
    assert len(digest) == 43
    assert b"=" not in digest
    assert b"+" not in digest
    assert b"/" not in digest


def test_snapshot_body_equals_contract_fixture() -> None:
    """The contract snapshot's state encodes to the shared fixture's exact bytes."""
    state = RelayState(
        "contract-session",
        "contract-stream",
        1800000000000,
        "Contract fixture",
        "running",
        1800000000000,
        alert_eligible=False,
    )
    body = snapshot_body("webui:00000000000000000000000000000001", [state])
    assert body == fixture_bytes("publisher-snapshot.json")


def test_started_body_equals_contract_fixture() -> None:
    """The contract session-started event encodes to the shared fixture's exact bytes."""
    body = started_body(
        "https://contract.example", "prf_default", "contract-session", 1800000000000
    )
    assert body == fixture_bytes("publisher-session-started.json")


def test_alert_eligibility_appears_only_as_false() -> None:
    """An eligible state omits `alertEligible`, as does an ineligible one on an old relay."""
    state = RelayState("s", None, 1, "t", "running", 2, alert_eligible=False)
    eligible = RelayState("s", None, 1, "t", "running", 2)
    assert b"alertEligible" not in snapshot_body("x", [eligible])
    assert b"alertEligible" not in snapshot_body("x", [state], with_eligibility=False)
    assert b'"streamId":null' in snapshot_body("x", [state])
