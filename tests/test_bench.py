"""`talaria-relay bench --quick --json`: an output-shape test, never a timing assertion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_quick_bench_prints_every_figure_of_every_store(tmp_path: Path) -> None:
    """The quick run exits 0 and prints one document with each store's workloads and passes."""
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
    text = json.dumps(document)
    for workload in ("allocate_revisions", "profile_identity", "record_started", "claim_mark"):
        assert workload in text
    assert "sqlite" in text
    assert "json" in text
    assert "transactions" in text
    assert "statements" in text
