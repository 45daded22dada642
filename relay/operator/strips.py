"""Each replica's last hour of passes as a small inline SVG strip, now at the right: `strip`
the serving replica's own passes (a tick each, an amber band over each backoff), `minutes`
another's from its fleet row, a minute a slot. Escaped text and shapes only (the page's CSP)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

STRIP_S = 3600
_MARKS = {"o": "ok", "f": "failed", "b": "backoff"}


def strip(ring: Sequence[Mapping[str, Any]], now_ms: int, width: int = 240) -> str:
    start = now_ms - STRIP_S * 1000

    def x(at: int) -> int:
        return max(0, min((at - start) * width // (STRIP_S * 1000), width - 2))

    bands, ticks, outcomes = [], [], []
    for one in ring:
        at, outcome, until = one.get("at"), one.get("outcome"), one.get("backoff_until")
        if not isinstance(at, int) or at < start or outcome not in ("ok", "failed"):
            continue
        outcomes.append(outcome)
        if isinstance(until, int) and until > at:
            left, right = x(at), x(min(until, now_ms))
            bands.append(_bar("backoff", left, max(right - left, 2)))
        ticks.append(_bar(outcome, x(at), 2))
    summary = f"{outcomes.count('ok')} passes ok, {outcomes.count('failed')} failed"
    return _svg(width, summary, [*bands, *ticks])


def minutes(passes: str, width: int = 240) -> str:
    """Green a minute its passes were ok, red if one failed, amber while it backed off."""
    slots = max(len(passes), 1)
    bars = []
    for n, mark in enumerate(passes):
        if (kind := _MARKS.get(mark)) is not None:
            left, right = n * width // slots, (n + 1) * width // slots
            bars.append(_bar(kind, left, max(right - left - 1, 1)))
    ok, failed = passes.count("o"), passes.count("f")
    return _svg(width, f"{ok} minute{'' if ok == 1 else 's'} ok, {failed} with a failure", bars)


def _bar(kind: str, left: int, width: int) -> str:
    # A backoff is a band behind the passes; a pass a full-height mark.
    y, height = (5, 10) if kind == "backoff" else (2, 16)
    return f'<rect class="{kind}" x="{left}" y="{y}" width="{width}" height="{height}"></rect>'


def _svg(width: int, summary: str, shapes: Iterable[str]) -> str:
    label = html.escape(summary, quote=True)
    return (
        f'<svg class="strip" width="{width}" height="20" viewBox="0 0 {width} 20" role="img">'
        f'<title>last hour: {label}</title><rect class="bg" x="0" y="0" width="{width}" '
        f'height="20"></rect>{"".join(shapes)}</svg><div class="muted small">{label}</div>'
    )
