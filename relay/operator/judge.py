"""The one judgement of a facts document (`relay.operator.facts`): its level (`ok`, `warn`,
`bad`), its headline and the problems behind it, each a sentence an operator acts on; made once
for the page's HTML, its JSON twin and `talaria-relay status`, so that each says the same."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from relay.pairing import DISABLED_PROFILE_HELP
from relay.publishing.clock import WARN_S, offset_text
from relay.store.url import StoreTarget, command

_ORDER = ("ok", "warn", "bad")
# Up to what age (seconds) a unit of that many seconds is the one `relative` says it in.
_UNITS = ((120, 1, "s"), (5400, 60, "min"), (172800, 3600, "h"), (math.inf, 86400, "d"))


def migrate_hint(store: StoreTarget | str | None) -> str:
    """The command that brings a store below head to it, naming the store: every hint says it."""
    return f"run {command('migrate', store)}"


def relative(delta_ms: int) -> str:
    """`in 40 s`, `12 s ago`, `3 min ago`, `2 h ago`, `4 d ago`."""
    seconds = abs(delta_ms) / 1000
    size, unit = next((size, unit) for below, size, unit in _UNITS if seconds < below)
    text = f"{seconds / size:.0f} {unit}"
    return f"in {text}" if delta_ms > 0 else f"{text} ago"


def backing_off(row: Mapping[str, Any], now_ms: int) -> bool:
    until = row.get("backoff_until")
    return isinstance(until, int) and until > now_ms


def said(row: Mapping[str, Any]) -> str:
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


def failure(row: Mapping[str, Any]) -> str:
    return f"{said(row)} ({row.get('backoff_failure')})"


def judge(document: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    problems: list[str] = []
    level = "ok"

    def problem(kind: str, text: str) -> None:
        nonlocal level
        level = max(level, kind, key=_ORDER.index)
        problems.append(text)

    store = document["store"]
    if store.get("error"):
        problem("bad", f"the store did not answer: {store['error']}")
    schema = store.get("schema")
    if schema is not None and not schema["at_head"] and not schema["compatible"]:
        problem(
            "bad",
            f"the schema is at {schema['current'] or 'no revision'}, not {schema['head']}: "
            + migrate_hint(store.get("url")),
        )
    if document.get("registration") is None and not store.get("error"):
        problem("bad", "not registered: pair this server with Talaria Relay")
    replicas = document["fleet"]["replicas"]
    now_ms = document["generated_at"]
    backing = [r for r in replicas if backing_off(r, now_ms)]
    for row in backing:
        problem(
            "bad" if len(backing) == len(replicas) else "warn",
            f"replica {row['owner']} is backing off: {failure(row)}; it retries "
            f"{relative(row['backoff_until'] - now_ms)}",
        )
    for row in replicas:
        if row.get("store_silent"):
            problem(
                "warn",
                f"replica {row['owner']} has had no answer from its store for "
                f"{row.get('store_silent_s')}s: check its network to the database",
            )
        offset = row.get("clock_offset_s")
        if isinstance(offset, int | float) and abs(offset) > WARN_S:
            problem(
                "warn",
                f"replica {row['owner']}'s clock is {offset_text(offset)}: "
                "check its time sync (NTP)",
            )
    profiles = document["profiles"]
    for profile in profiles:
        if not profile["enrolled"]:
            problem(
                "warn",
                f"profile {profile['name']} is not publishing: {profile['disabled_why']} "
                f"(how to recover: the manual's {DISABLED_PROFILE_HELP})",
            )
    live = [r for r in replicas if r["alive"]]
    enrolled = sum(bool(p["enrolled"]) for p in profiles)
    counts = f"{len(live)} replica{'s' * (len(live) != 1)} live"
    if backing:
        counts += f" ({len(backing)} backing off)"
    counts += f" · {enrolled} of {len(profiles)} profile{'s' * (len(profiles) != 1)} publishing"
    headline = {
        "ok": f"Publishing normally — {counts}",
        "warn": f"Publishing, with problems — {counts}",
        "bad": f"Not publishing normally — {counts}",
    }[level]
    return level, headline, problems
