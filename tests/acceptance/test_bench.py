"""`talaria-relay bench --quick --json`: an output-shape test, never a timing assertion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_quick_bench_prints_every_figure_of_every_store(tmp_path: Path) -> None:
    """The quick run exits 0 and prints one document: every workload at every ledger size with
    p50/p99 on SQLite and JSON, the raw side on SQLite, the publisher passes, the targets."""
    env = {k: v for k, v in os.environ.items() if k != "TALARIA_RELAY_TEST_POSTGRES_URL"}
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "relay", "bench", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert isinstance(document, dict)
    stores = {store["backend"]: store for store in document["stores"]}
    assert set(stores) == {"sqlite", "json"}
    for backend, store in stores.items():
        names = {(w["name"], w["ledger"]) for w in store["workloads"]}
        assert ("allocate_revisions", None) in names
        assert ("profile_identity", None) in names
        assert ("outbox_enqueue_ack", None) in names
        for ledger in document["method"]["ledgers"]:
            assert ("record_started", ledger) in names
            assert ("claim_mark", ledger) in names
        for workload in store["workloads"]:
            assert set(workload["store"]) == {"ops_per_s", "p50_us", "p99_us"}
            assert (workload["raw"] is None) == (backend == "json")
        assert {(p["sessions"], p["pass"]) for p in store["publisher"]} == {
            (20, "first"),
            (20, "steady"),
            (200, "first"),
            (200, "steady"),
        }
        assert {"wall_ms", "transactions", "statements"} <= set(store["publisher"][0])
    assert stores["sqlite"]["publisher_shape"]["steady_same_cost"] is not None
    relay_rows = stores["sqlite"]["distance"]["relay"]
    assert [row["relay_rtt_ms"] for row in relay_rows] == [0.0, 50.0]
    assert all(row["profiles"] == 10 and row["round_trips"] >= 10 for row in relay_rows)
    assert stores["json"]["distance"] == {"store": [], "relay": []}
    assert {check["store"] for check in document["targets"]} == {"sqlite"}
    # Transactions are counted, not timed: the first pass's shape is met on every run.
    first_pass = [c for c in document["targets"] if c["target"].startswith("first pass")]
    assert {c["target"] for c in first_pass} == {
        "first pass: transactions per batch of 64",
        "first pass: transactions over steady + batches",
    }
    assert all(c["met"] for c in first_pass), first_pass


def test_bench_at_scale_reports_freshness_commits_connections_and_cpu(tmp_path: Path) -> None:
    """`bench --replicas 2` runs two replica processes on a scratch Postgres database and
    reports every event's freshness on the relay, commits per second, connections and CPU."""
    url = os.environ.get("TALARIA_RELAY_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("needs TALARIA_RELAY_TEST_POSTGRES_URL")
    done = subprocess.run(
        [sys.executable, "-m", "relay", "bench", "--replicas", "2", "--profiles", "2",
         "--sessions", "10", "--seconds", "3", "--store", url],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["events"] >= 20
    assert figures["events_not_shown"] == 0
    assert 0 < figures["freshness_p50_ms"] <= figures["freshness_p99_ms"]
    assert figures["commits_per_s"] > 0
    assert figures["connections_per_replica"] >= 1
    assert figures["cpu_per_replica"] > 0
