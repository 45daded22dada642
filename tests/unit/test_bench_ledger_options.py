"""`talaria-relay bench --ledger-sizes` and `--ledger-only`: what reaches the bench's plan."""

from __future__ import annotations

import pytest

from benchmarks import Plan
from benchmarks.cli import parser


def test_ledger_sizes_are_read_and_the_plan_measures_them_smallest_first() -> None:
    """`--ledger-sizes 100000,10` reaches the plan, which measures 10 then 100,000."""
    args = parser().parse_args(["--ledger-sizes", "100000,10", "--ledger-only"])
    assert args.ledger_sizes == (100_000, 10)
    assert args.ledger_only
    plan = Plan(ledger_sizes=args.ledger_sizes, ledger_only=True)
    assert plan.ledgers == (10, 100_000)


def test_without_ledger_sizes_the_defaults_stand() -> None:
    """No option: 10, 10,000 and 100,000, or 10 and 250 with --quick."""
    args = parser().parse_args([])
    assert Plan(ledger_sizes=args.ledger_sizes).ledgers == (10, 10_000, 100_000)
    assert Plan(quick=True, ledger_sizes=args.ledger_sizes).ledgers == (10, 250)


@pytest.mark.parametrize("sizes", ["", "10,x", "0,10", "10,20000000", "10,,20"])
def test_ledger_sizes_out_of_range_or_not_numbers_are_a_usage_error(
    sizes: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A size that is not a whole number from 1 to 10,000,000 is refused with exit code 2."""
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["--ledger-sizes", sizes])
    assert exited.value.code == 2
    assert "ledger size" in capsys.readouterr().err
