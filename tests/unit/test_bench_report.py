"""The bench's text report says what it measured in words, never blanks like `+ - + -`."""

from __future__ import annotations

from benchmarks.report import _shape
from relay.publishing.announcements import STARTED_BATCH


def test_a_store_without_transaction_counts_says_so() -> None:
    """JSON files count no transactions: the shape line says there is no fit, no dashes."""
    line = _shape(
        {
            "steady_wall_largest_vs_smallest": 1.02,
            "steady_same_cost": None,
            "first_transactions_fixed": None,
            "first_transactions_per_batch": None,
        }
    )
    assert "no transaction counts on this store" in line
    assert " - " not in line
    assert "+ -" not in line


def test_a_counted_store_gives_its_fit_per_batch() -> None:
    """SQLite: the first pass as the steady pass plus a fixed part and a part per batch."""
    line = _shape(
        {
            "steady_wall_largest_vs_smallest": 1.1,
            "steady_same_cost": True,
            "first_transactions_fixed": 3.0,
            "first_transactions_per_batch": 2.0,
        }
    )
    assert line.endswith(
        f"same cost True; first pass: the steady pass's transactions + 3.00 + 2.00 per batch "
        f"of {STARTED_BATCH} announcements"
    )
