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

from relay.operator.strips import minutes, strip
from relay.publishing.clock import WARN_S
from relay.store.url import command

REFRESH_S = 30

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
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #eceff2;vertical-align:top}
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


def _when(at_ms: int | None, now_ms: int) -> str:
    """`12 s ago` (or `in 40 s`), with the UTC time as a tooltip; `never` for none."""
    if at_ms is None:
        return '<span class="muted">never</span>'
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at_ms / 1000))
    return f'<span title="{_t(stamp)}">{_t(_relative(at_ms - now_ms))}</span>'


def _relative(delta_ms: int) -> str:
    seconds = abs(delta_ms) / 1000
    if seconds < 120:
        text = f"{seconds:.0f} s"
    elif seconds < 5400:
        text = f"{seconds / 60:.0f} min"
    elif seconds < 172800:
        text = f"{seconds / 3600:.0f} h"
    else:
        text = f"{seconds / 86400:.0f} d"
    return f"in {text}" if delta_ms > 0 else f"{text} ago"


def _age(seconds: float | None) -> str:
    return "" if seconds is None else _t(_relative(-int(seconds * 1000)).removesuffix(" ago"))


def _pill(kind: str, text: str) -> str:
    return f'<span class="pill {kind}">{_t(text)}</span>'


def verdict(document: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    """The one line an operator reads first: its level (ok, warn, bad), the line, the reasons."""
    reasons: list[str] = list(document.get("problems", []))
    level = "bad" if reasons else "ok"
    schema = document.get("schema")
    if schema is not None and not schema["at_head"]:
        level = "bad"
        reasons.append(
            f"the schema is at {schema['revision']}, not {schema['head']}: "
            f"run {command('migrate', document.get('store', {}).get('url'))}"
        )
    if document.get("registration") is None and not document.get("problems"):
        level = "bad"
        reasons.append("not registered: pair this server with Talaria Relay")
    replicas = document["fleet"]["replicas"]
    now_ms = document["generated_at"]
    backing = [r for r in replicas if _backing_off(r, now_ms)]
    if backing:
        level = "bad" if len(backing) == len(replicas) else _worse(level, "warn")
        for row in backing:
            reasons.append(
                f"replica {row['owner']} is backing off: {failure(row)}; it retries "
                f"{_relative(row['backoff_until'] - now_ms)}"
            )
    for row in replicas:
        offset = row.get("clock_offset_s")
        if isinstance(offset, int | float) and abs(offset) > WARN_S:
            level = _worse(level, "warn")
            reasons.append(
                f"replica {row['owner']}'s clock is {_offset(offset)}'s: check its time sync (NTP)"
            )
    for profile in document["profiles"]:
        if not profile["enrolled"]:
            level = _worse(level, "warn")
            reasons.append(
                f"profile {profile['name']} is not publishing: {profile['disabled_why']}"
            )
    live = [r for r in replicas if r["alive"]]
    profiles = document["profiles"]
    enrolled = sum(bool(p["enrolled"]) for p in profiles)
    counts = f"{len(live)} replica{'s' * (len(live) != 1)} live"
    if backing:
        counts += f" ({len(backing)} backing off)"
    counts += f" · {enrolled} of {len(profiles)} profile{'s' * (len(profiles) != 1)} publishing"
    line = {
        "ok": f"Publishing normally — {counts}",
        "warn": f"Publishing, with problems — {counts}",
        "bad": f"Not publishing normally — {counts}",
    }[level]
    return level, line, reasons


def failure(row: Mapping[str, Any]) -> str:
    """What made a replica back off, in an operator's words, with the failure's class."""
    return f"{_said(row)} ({row.get('backoff_failure')})"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _said(row: Mapping[str, Any]) -> str:
    kind = row.get("backoff_failure")
    status = row.get("backoff_status")
    if isinstance(status, int):
        return f"the relay answered HTTP {status}"
    if kind in ("RelayUnreachableError", "RelayTimeoutError"):
        return "the relay could not be reached"
    if isinstance(kind, str) and kind.startswith("Store"):
        return "the store did not answer"
    if kind == "RelayHttpError":
        return "the relay answered with an error"
    return "a failure in the pass"


def _worse(level: str, other: str) -> str:
    order = ("ok", "warn", "bad")
    return max(level, other, key=order.index)


def _backing_off(row: Mapping[str, Any], now_ms: int) -> bool:
    until = row.get("backoff_until")
    return isinstance(until, int) and until > now_ms


def render(document: Mapping[str, Any]) -> str:
    """The page, as one HTML string."""
    now_ms = document["generated_at"]
    level, line, reasons = verdict(document)
    listed = "".join(f"<li>{_t(reason)}</li>" for reason in reasons)
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{REFRESH_S}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Talaria relay · operator</title>",
        f"<style>{STYLE}</style></head><body><main>",
        f"<h1>Talaria relay{_publisher(document)}</h1>",
        f'<div class="meta">Store {_t(document["store"]["backend"])} '
        f"<code>{_t(document['store']['url'])}</code> · read {_when(now_ms, now_ms)} · "
        f"refreshes every {REFRESH_S} s · "
        '<a href="operator.json">JSON</a></div>',
        f'<div class="verdict {level}" role="status">{_t(line)}'
        + (f"<ul>{listed}</ul>" if listed else "")
        + "</div>",
        _fleet(document["fleet"], now_ms, document["store"]["url"]),
        _profiles(document["profiles"]),
        _registration(document.get("registration"), document.get("schema")),
        "<footer>Read-only. No key material is shown: the key appears only as the fingerprint "
        "of its public half.</footer>",
        "</main></body></html>",
    ]
    return "\n".join(parts)


def _publisher(document: Mapping[str, Any]) -> str:
    found = document.get("registration")
    return "" if found is None else f" · <code>{_t(found['publisher_id'])}</code>"


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
    if striped:
        headings.append("Passes in the last hour (now at the right)")
    notes = []
    if fleet.get("more"):
        notes.append(f"and {_t(fleet['more'])} more")
    if fleet.get("gone_earlier"):
        notes.append(f"{_t(fleet['gone_earlier'])} gone more than an hour ago, not listed")
    if fleet.get("source") != "fleet":
        notes.append(
            "replicas known from the leases they hold: this store keeps no fleet record (run "
            f"{_t(command('migrate', store_url))}), so another replica's last pass is not known"
        )
    extra = "".join(f'<p class="muted">{note}</p>' for note in notes)
    legend = (
        '<p class="legend muted"><span><i class="ok"></i>ok</span>'
        '<span><i class="failed"></i>failed</span>'
        '<span><i class="backoff"></i>backing off</span></p>'
        if striped
        else ""
    )
    return f"<h2>Replicas</h2>{_table(headings, rows)}{legend}{extra}"


def _state(row: Mapping[str, Any], now_ms: int) -> str:
    if not row["alive"]:
        return _pill("off", "gone")
    if _backing_off(row, now_ms):
        return _pill("warn", "backing off")
    return _pill("ok", "live")


def _who(row: Mapping[str, Any], now_ms: int) -> str:
    """The owner; where it runs and since when; `this one` for the replica serving the page."""
    lines = [f'<code class="nowrap">{_t(row["owner"])}</code>']
    if row["this_replica"]:
        lines.append('<span class="muted small">(this one)</span>')
    if "host" in row:
        where = f"{row['host']} · pid {row['pid']}"
        lines.append(f'<span class="muted small nowrap">{_t(where)}</span>')
    offset = row.get("clock_offset_s")
    if isinstance(offset, int | float):
        kind = "bad" if abs(offset) > WARN_S else "muted"
        lines.append(f'<span class="{kind} small nowrap">clock {_t(_offset(offset))}</span>')
    if "started_at" in row and row["alive"]:
        up = _relative(row["started_at"] - now_ms).removesuffix(" ago")
        lines.append(f'<span class="muted small">up {_t(up)}</span>')
    elif "seen_at" in row and not row["alive"]:
        lines.append(f'<span class="muted small">last seen {_when(row["seen_at"], now_ms)}</span>')
    return "<br>".join(lines)


def _offset(offset_s: float) -> str:
    """`0.4 s ahead of the store`, `2.0 s behind the store`, `in step with the store`."""
    if abs(offset_s) < 0.05:
        return "in step with the store"
    side = "ahead of" if offset_s > 0 else "behind"
    return f"{abs(offset_s):.1f} s {side} the store"


def _release(row: Mapping[str, Any]) -> str:
    if "release" not in row:
        return _unknown(row)
    head = f'<br><span class="muted small nowrap">schema {_t(row["schema_head"])}</span>'
    return f"{_t(row['release'])}{head}"


def _last_pass(row: Mapping[str, Any], now_ms: int) -> str:
    last = row.get("last_pass")
    if not last:
        # A fleet row carries the pass before the one it was written in: a replica's first.
        recorded = "release" in row
        return _unknown(row) if not recorded else '<span class="muted">none recorded yet</span>'
    outcome = last.get("outcome") or ""
    said = {"ok": "ok", "backoff": "failed", "stopped": "stopped for good"}.get(outcome, outcome)
    kind = "" if outcome == "ok" else " bad"
    return f'{_when(last["at"], now_ms)}<br><span class="small{kind}">{_t(said)}</span>'


def _backoff(row: Mapping[str, Any], now_ms: int) -> str:
    if not _backing_off(row, now_ms):
        return ""
    return (
        f'{_t(_sentence(_said(row)))}<div class="muted small">'
        f"{_t(row.get('backoff_failure'))} · retries "
        f"{_when(row['backoff_until'], now_ms)}</div>"
    )


def _unknown(row: Mapping[str, Any]) -> str:
    return '<span class="muted nowrap">not recorded</span>'


def _profiles(profiles: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for p in profiles:
        if p["enrolled"]:
            state = _pill("ok", "enrolled")
        else:
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
            f'<tr><td><strong>{_t(p["name"])}</strong><br><code class="muted">'
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
        fingerprint = found["key_fingerprint"]
        items += [
            ("Relay", f"<code>{_t(found['relay_url'])}</code>"),
            ("Publisher id", f"<code>{_t(found['publisher_id'])}</code>"),
            ("Key id", f"<code>{_t(found['key_id'])}</code>"),
            (
                "Public key",
                f"<code>{_t(fingerprint)}</code>"
                if fingerprint
                else '<span class="muted">cannot be read here</span>',
            ),
            ("Private key", encrypted),
        ]
    if schema is not None:
        state = _pill("ok", "at head") if schema["at_head"] else _pill("bad", "not at head")
        items.append(
            ("Schema", f"<code>{_t(schema['revision'])}</code> (head {_t(schema['head'])}) {state}")
        )
    listed = "".join(f"<dt>{_t(term)}</dt><dd>{value}</dd>" for term, value in items)
    return f"<h2>Registration</h2><dl>{listed}</dl>"
