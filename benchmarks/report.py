"""The bench document as a table for people; `--json` prints the document itself."""

from __future__ import annotations

from typing import Any

from relay.publishing.announcements import STARTED_BATCH


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _us(value: float | None) -> str:
    """Microseconds: tenths where they mean something, whole ones past 100."""
    return _number(value, 1 if value is not None and value < 100 else 0)


def render(document: dict[str, Any]) -> list[str]:
    """Lines of a plain-text report: workloads, ledger curves, processes, publisher passes."""
    lines = [
        f"talaria-relay bench ({'quick' if document['quick'] else 'full'}): "
        f"{document['method']['rounds']} rounds of {document['method']['ops_per_round']} ops, "
        f"{document['machine']['cpus']} CPUs, Python {document['machine']['python']}"
    ]
    for store in document["stores"]:
        lines += ["", f"{store['backend']}  {store['url']}"]
        lines.append(
            f"  {'workload':<26}{'store ops/s':>12}{'p50 µs':>11}{'p99 µs':>11}"
            f"{'raw ops/s':>12}{'raw p50':>9}{'raw p99':>9}{'ratio':>8}"
        )
        for result in store["workloads"]:
            name = result["name"] + (f" @{result['ledger']:,}" if result["ledger"] else "")
            mine, raw = result["store"], result["raw"] or {}
            lines.append(
                f"  {name:<26}{_number(mine['ops_per_s']):>12}{_us(mine['p50_us']):>11}"
                f"{_us(mine['p99_us']):>11}{_number(raw.get('ops_per_s')):>12}"
                f"{_us(raw.get('p50_us')):>9}{_us(raw.get('p99_us')):>9}"
                f"{_number(result['ratio'], 3):>8}"
            )
        for name, curve in store["ledger_curve"].items():
            lines.append(
                f"  ledger {name}: store ops/s at the largest ÷ at the smallest, round by round "
                f"{_number(curve['largest_vs_smallest'], 3)}"
            )
        if (processes := store["processes"]) is not None:
            lines.append(
                f"  {processes['processes']} processes allocating ({processes['rounds']} x "
                f"{processes['seconds']:g} s, medians): store "
                f"{_number(processes['store_ops_per_s'])}/s, raw "
                f"{_number(processes['raw_ops_per_s'])}/s, pgbench "
                f"{_number(processes['pgbench_ops_per_s'])}/s; store ÷ pgbench "
                f"{_number(processes['store_vs_pgbench'], 3)}, raw ÷ pgbench "
                f"{_number(processes['raw_vs_pgbench'], 3)}"
            )
        for one in store["publisher"]:
            lines.append(
                f"  publisher P={one['profiles']} S={one['sessions']} {one['pass']:<6} pass: "
                f"{_number(one['wall_ms'], 2)} ms, {_number(one['transactions'], 0)} "
                f"transactions, {_number(one['statements'], 0)} statements"
            )
        if store["publisher"]:
            lines.append(_shape(store["publisher_shape"]))
        lines += _distance(store.get("distance") or {})
    return lines + _targets(document["targets"])


def _shape(shape: dict[str, Any]) -> str:
    """The publisher's cost shape in words; a store that counts no transactions (JSON files)
    has no transaction figures to fit, and says so instead of printing blanks."""
    line = (
        "  publisher steady pass, largest S ÷ smallest: wall "
        f"{_number(shape['steady_wall_largest_vs_smallest'], 3)}"
    )
    fixed, per_batch = shape["first_transactions_fixed"], shape["first_transactions_per_batch"]
    if shape["steady_same_cost"] is None or fixed is None or per_batch is None:
        return line + "; no transaction counts on this store, so no cost fit"
    return (
        f"{line}, same cost {shape['steady_same_cost']}; first pass: the steady pass's "
        f"transactions + {fixed:,.2f} + {per_batch:,.2f} per batch of {STARTED_BATCH} "
        "announcements"
    )


def _distance(distance: dict[str, Any]) -> list[str]:
    lines = []
    for side, key in (("store", "store_rtt_ms"), ("relay", "relay_rtt_ms")):
        for row in distance.get(side, []):
            lines.append(
                f"  steady pass P={row['profiles']}, {side} {row[key]:g} ms away: "
                f"{_number(row['wall_ms'], 2)} ms, {_number(row['round_trips'], 0)} round trips "
                f"to the {side}, {_number(row['transactions'], 0)} transactions "
                f"({_number(row['writes'], 1)} writes), {_number(row['statements'], 0)} statements"
            )
    return lines


def _targets(checks: list[dict[str, Any]]) -> list[str]:
    lines = ["", "targets"]
    for one in checks:
        verdict = {True: "met", False: "MISSED", None: "-"}[one["met"]]
        lines.append(
            f"  {verdict:<7}{one['store']:<10}{one['target']:<52}"
            f"{_number(one['measured'], 3):>8} (wanted {one['bound']})"
        )
    return lines
