"""The operator page: the facts document (`relay.operator.facts`) as one HTML page.

Server-rendered, no script: it refreshes itself every `REFRESH_S` seconds with a meta refresh.
Every value that reaches the page goes through `html.escape` (`_t`), profile names and error
text included; the only inline code is the style sheet below, allowed by its hash in a strict
Content-Security-Policy (no script, no style attribute, no outside resource).
"""

from __future__ import annotations

import base64
import hashlib
import html
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from relay.operator.judge import backing_off, migrate_hint, relative, said
from relay.operator.strips import minutes, strip
from relay.publishing.clock import WARN_S, offset_text

REFRESH_S = 30
_NOT_RECORDED = '<span class="muted nowrap">not recorded</span>'
# Names longer than this are shown cut, the whole name in a `<details>` under it.
LONG = 64

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:20px;margin:0 0 4px}
h2{font-size:15px;margin:26px 0 8px;text-transform:uppercase;letter-spacing:.04em;color:#4a5360}
.meta{color:#5b6470;font-size:12px}
.verdict{margin:14px 0 6px;padding:12px 16px;border-radius:8px;font-size:17px;font-weight:600}
.verdict.ok{background:#e3f6ea;color:#0f5a2c;border:1px solid #9ad6b0}
.verdict.warn{background:#fff4dc;color:#6b4700;border:1px solid #f0cd7a}
.verdict.bad{background:#fde6e6;color:#8a1111;border:1px solid #ee9f9f}
.verdict ul{margin:6px 0 0;padding-left:20px;font-weight:400;font-size:14px}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #dde1e6}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #eceff2;vertical-align:top;
overflow-wrap:anywhere}
.verdict li,h1,.meta{overflow-wrap:anywhere}
details.long summary{cursor:pointer}details.long[open] summary{color:#5b6470}
th{background:#f0f2f5;font-weight:600;font-size:12px;color:#4a5360}
td.n{text-align:right;font-variant-numeric:tabular-nums}
dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;margin:0;
background:#fff;border:1px solid #dde1e6;padding:10px 14px}
dt{color:#5b6470}dd{margin:0;overflow-wrap:anywhere}
code{font:12px ui-monospace,monospace}
.pill{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;
white-space:nowrap}
.pill.ok{background:#e3f6ea;color:#0f5a2c}.pill.warn{background:#fff4dc;color:#6b4700}
.pill.bad{background:#fde6e6;color:#8a1111}.pill.off{background:#eceff2;color:#4a5360}
.why{color:#8a1111;font-size:12px}.bad{color:#8a1111}
.muted{color:#7a828d}.small{font-size:12px}.nowrap{white-space:nowrap}
svg.strip{display:block}
svg.strip .bg{fill:#f0f2f5}
svg.strip .ok{fill:#2f9e5b}svg.strip .failed{fill:#d33b3b}svg.strip .backoff{fill:#e0a526}
.legend span{margin-right:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:-1px}
.legend .ok{background:#2f9e5b}.legend .failed{background:#d33b3b}
.legend .backoff{background:#e0a526}
footer{margin-top:24px;font-size:12px;color:#7a828d}
"""

_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
CSP = (
    f"default-src 'none'; style-src 'sha256-{_HASH}'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
# On every answer of the operator routes, the HTML, the JSON and the refusals alike.
HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-store"),
    ("Referrer-Policy", "no-referrer"),
)


def _t(value: object) -> str:
    """Any value as escaped text: the only way a value reaches the page."""
    return html.escape("" if value is None else str(value), quote=True)


def _name(value: str) -> str:
    """Escaped; past `LONG` characters (enrollment takes 4,096) cut, the whole a click away."""
    if len(value) <= LONG:
        return _t(value)
    return (
        f'<details class="long"><summary>{_t(value[:LONG])}… '
        f'<span class="muted small">({len(value):,} characters)</span></summary>'
        f"{_t(value)}</details>"
    )


def _when(at_ms: int | None, now_ms: int) -> str:
    """`12 s ago` (or `in 40 s`), with the UTC time as a tooltip; `never` for none."""
    if at_ms is None:
        return '<span class="muted">never</span>'
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at_ms / 1000))
    return f'<span title="{_t(stamp)}">{_t(relative(at_ms - now_ms))}</span>'


def _age(seconds: float | None) -> str:
    return "" if seconds is None else _t(relative(-int(seconds * 1000)).removesuffix(" ago"))


def _pill(kind: str, text: str) -> str:
    return f'<span class="pill {kind}">{_t(text)}</span>'


def verdict(document: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    """The level, headline and problems the document was judged to have when gathered."""
    return document["level"], document["headline"], list(document["problems"])


def render(document: Mapping[str, Any]) -> str:
    now_ms = document["generated_at"]
    level, line, reasons = verdict(document)
    listed = "".join(f"<li>{_t(reason)}</li>" for reason in reasons)
    registered = document.get("registration")
    publisher = "" if registered is None else f" · <code>{_t(registered['publisher_id'])}</code>"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{REFRESH_S}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Talaria relay · operator</title>",
        f"<style>{STYLE}</style></head><body><main>",
        f"<h1>Talaria relay{publisher}</h1>",
        f'<div class="meta">Store {_t(document["store"]["backend"])} '
        f"<code>{_t(document['store']['url'])}</code> · read {_when(now_ms, now_ms)} · "
        f"refreshes every {REFRESH_S} s · "
        '<a href="operator.json">JSON</a></div>',
        f'<div class="verdict {level}" role="status">{_t(line)}'
        + (f"<ul>{listed}</ul>" if listed else "")
        + "</div>",
        _fleet(document["fleet"], now_ms, document["store"]["url"]),
        _profiles(document["profiles"]),
        _registration(document.get("registration"), document["store"].get("schema")),
        "<footer>Read-only. No key material is shown: the key appears only as the fingerprint "
        "of its public half.</footer>",
        "</main></body></html>",
    ]
    return "\n".join(parts)


def _table(headings: Sequence[str], rows: Iterable[str]) -> str:
    head = "".join(f"<th>{_t(h)}</th>" for h in headings)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _fleet(fleet: Mapping[str, Any], now_ms: int, store_url: str) -> str:
    rows = []
    striped = any("ring" in row or row.get("passes") for row in fleet["replicas"])
    for row in fleet["replicas"]:
        cells = [
            f"<td>{_state(row, now_ms)}</td>",
            f"<td>{_who(row, now_ms)}</td>",
            f"<td>{_release(row)}</td>",
            f"<td>{_last_pass(row, now_ms)}</td>",
            f"<td>{_backoff(row, now_ms)}</td>",
            f'<td class="n">{_t(row["runs"])}</td>',
            f'<td class="n">{_t(row["claims"])}</td>',
        ]
        if striped:
            # This replica's passes from its memory; every other one's from its fleet row, a
            # minute a slot (a row from before 0009 has none).
            if "ring" in row:
                passes = strip(row["ring"], now_ms)
            elif row.get("passes"):
                passes = minutes(row["passes"])
            else:
                passes = '<span class="muted small">not recorded</span>'
            cells.append(f"<td>{passes}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    headings = [
        "State",
        "Replica",
        "Release",
        "Last pass",
        "Backing off because",
        "Sessions it publishes",
        "Announcements it holds",
    ]
    legend = ""
    if striped:
        headings.append("Passes in the last hour (now at the right)")
        legend = (
            '<p class="legend muted"><span><i class="ok"></i>ok</span>'
            '<span><i class="failed"></i>failed</span>'
            '<span><i class="backoff"></i>backing off</span></p>'
        )
    notes = []
    if fleet.get("more"):
        notes.append(f"and {_t(fleet['more'])} more")
    if fleet.get("gone_earlier"):
        notes.append(f"{_t(fleet['gone_earlier'])} gone more than an hour ago, not listed")
    if fleet.get("source") != "fleet":
        notes.append(
            "replicas known from the leases they hold: this store keeps no fleet record "
            f"({_t(migrate_hint(store_url))}), so another replica's last pass is not known"
        )
    extra = "".join(f'<p class="muted">{note}</p>' for note in notes)
    return f"<h2>Replicas</h2>{_table(headings, rows)}{legend}{extra}"


def _state(row: Mapping[str, Any], now_ms: int) -> str:
    if not row["alive"]:
        return _pill("off", "gone")
    if backing_off(row, now_ms):
        return _pill("warn", "backing off")
    return _pill("ok", "live")


def _who(row: Mapping[str, Any], now_ms: int) -> str:
    lines = [f'<code class="nowrap">{_t(row["owner"])}</code>']
    if row["this_replica"]:
        lines.append('<span class="muted small">(this one)</span>')
    if "host" in row:
        where = f"{row['host']} · pid {row['pid']}"
        lines.append(f'<span class="muted small nowrap">{_t(where)}</span>')
    if isinstance(offset := row.get("clock_offset_s"), int | float):
        kind = "bad" if abs(offset) > WARN_S else "muted"
        lines.append(f'<span class="{kind} small nowrap">clock {_t(offset_text(offset))}</span>')
    if "started_at" in row and row["alive"]:
        up = relative(row["started_at"] - now_ms).removesuffix(" ago")
        lines.append(f'<span class="muted small">up {_t(up)}</span>')
    elif "seen_at" in row and not row["alive"]:
        lines.append(f'<span class="muted small">last seen {_when(row["seen_at"], now_ms)}</span>')
    return "<br>".join(lines)


def _release(row: Mapping[str, Any]) -> str:
    if "release" not in row:
        return _NOT_RECORDED
    head = f'<br><span class="muted small nowrap">schema {_t(row["schema_head"])}</span>'
    return f"{_t(row['release'])}{head}"


def _last_pass(row: Mapping[str, Any], now_ms: int) -> str:
    last = row.get("last_pass")
    if not last:
        # A fleet row carries the pass before the one it was written in: a replica's first.
        return '<span class="muted">none recorded yet</span>' if "release" in row else _NOT_RECORDED
    outcome = last.get("outcome") or ""
    said = {"ok": "ok", "backoff": "failed", "stopped": "stopped for good"}.get(outcome, outcome)
    kind = "" if outcome == "ok" else " bad"
    return f'{_when(last["at"], now_ms)}<br><span class="small{kind}">{_t(said)}</span>'


def _backoff(row: Mapping[str, Any], now_ms: int) -> str:
    if not backing_off(row, now_ms):
        return ""
    reason = said(row)
    return (
        f'{_t(reason[:1].upper() + reason[1:])}<div class="muted small">'
        f"{_t(row.get('backoff_failure'))} · retries "
        f"{_when(row['backoff_until'], now_ms)}</div>"
    )


def _profiles(profiles: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for p in profiles:
        state = _pill("ok", "enrolled")
        if not p["enrolled"]:
            state = f'{_pill("bad", "disabled")}<div class="why">{_t(p["disabled_why"])}</div>'
        accepted = p["last_accepted"]
        if accepted is None:
            last = '<span class="muted">none by this replica</span>'
        elif accepted["states"] == 0:
            last = f"{_age(accepted['age_s'])} ago · empty (no session to show)"
        else:
            last = (
                f"{_age(accepted['age_s'])} ago · {_t(accepted['states'])} "
                f"session{'s' * (accepted['states'] != 1)} "
                f'<span class="muted small">revision {_t(accepted["revision"])}</span>'
            )
        unsent = _t(p["announcements_unsent"])
        if p["announcements_oldest_age_s"] is not None:
            unsent += f' <span class="muted">oldest {_age(p["announcements_oldest_age_s"])}</span>'
        outbox = _t(p["outbox_depth"])
        if p["outbox_oldest_age_s"] is not None:
            outbox += f' <span class="muted">oldest {_age(p["outbox_oldest_age_s"])}</span>'
        rows.append(
            f'<tr><td><strong>{_name(p["name"])}</strong><br><code class="muted">'
            f"{_t(p['profile_id'])}</code></td><td>{state}</td><td>{last}</td>"
            f'<td class="n">{_t(p["presence_leases"])}</td><td class="n">{unsent}</td>'
            f'<td class="n">{outbox}</td></tr>'
        )
    headings = [
        "Profile",
        "State",
        "Last accepted snapshot",
        "Open tabs",
        "Announcements unsent",
        "Deletions unacknowledged",
    ]
    body = _table(headings, rows) if rows else '<p class="muted">No profile is enrolled.</p>'
    return f"<h2>Profiles</h2>{body}"


def _registration(found: Mapping[str, Any] | None, schema: Mapping[str, Any] | None) -> str:
    items: list[tuple[str, str]] = []
    if found is None:
        items.append(("Registration", '<span class="muted">not registered</span>'))
    else:
        encrypted = {
            True: _pill("ok", "encrypted at rest"),
            False: _pill("warn", "not encrypted at rest")
            + ' <span class="muted small">set TALARIA_RELAY_KEY_PASSPHRASE and run '
            "<code>talaria-relay rekey</code></span>",
        }.get(found["key_encrypted"], _pill("bad", "missing"))
        public = '<span class="muted">cannot be read here</span>'
        if found["key_fingerprint"]:
            public = f"<code>{_t(found['key_fingerprint'])}</code>"
        items += [
            ("Relay", f"<code>{_t(found['relay_url'])}</code>"),
            ("Publisher id", f"<code>{_t(found['publisher_id'])}</code>"),
            ("Key id", f"<code>{_t(found['key_id'])}</code>"),
            ("Public key", public),
            ("Private key", encrypted),
        ]
    if schema is not None:
        if schema["at_head"]:
            state = _pill("ok", "at head")
        elif schema["compatible"]:
            state = _pill("ok", "ahead of this code, compatible")
        else:
            state = _pill("bad", "not at head")
        items.append(
            ("Schema", f"<code>{_t(schema['current'])}</code> (head {_t(schema['head'])}) {state}")
        )
    listed = "".join(f"<dt>{_t(term)}</dt><dd>{value}</dd>" for term, value in items)
    return f"<h2>Registration</h2><dl>{listed}</dl>"
