"""The one table of hostile bodies every face of the browser routes is tried with (ASGI, WSGI)."""

from __future__ import annotations

HOSTILE_PATHS = ["/api/talaria/relay/pair", "/api/talaria/presence", "/api/talaria/viewed"]

HOSTILE: list[bytes] = [
    b"",
    b"null",
    b"[" * 50_000,
    b'{"seq": ' + b"9" * 5000 + b"}",
    b'{"tab_id": "tab-00001", "active": true, "seq": 1e999}',
    b'{"tab_id": "tab-00001", "active": true, "seq": NaN}',
    b'{"tab_id": "tab-\\u0000001", "active": true, "seq": 1}',
    b'{"tab_id": "\\ud800\\ud800\\ud800x", "active": true, "seq": 1}',
    b'{"session_id": "chat\\u0000", "relay_url": "\\udfff", "publisher_id": "\\ud800",'
    b' "publisher_invitation": "\\u0000"}',
    b'{"session_id": "\\ud800"}',
    b'{"session_id": "' + b"s" * 5000 + b'"}',
    b"\xff\xfe\x00",
    '{"session_id": "caf\u00e9"}'.encode("latin-1"),
    b'{"relay_url": 1, "publisher_id": {}, "publisher_invitation": [], "label": true}',
]

# Profile names and session titles a user could type: markup, an attribute break-out, a
# script URL, a lone surrogate's neighbour (still valid text). Every page shows them as text.
HOSTILE_NAMES: list[str] = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</td></tr></table><h1>owned</h1>",
    "javascript:alert(1)",
    "x' onmouseover='alert(1)",
]
