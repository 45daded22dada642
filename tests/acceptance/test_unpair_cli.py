"""`talaria-relay unpair`: asks before it forgets, `--yes` for scripts, clear exit codes; and
the manual's quick start with `unpair(if_relay_changed=True)` runs twice in one folder."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path

import forked
import pytest
from cli_support import child_env, populate, run

from relay.cli.unpair import cmd_unpair
from relay.store import open_store

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.sqlite


async def registered(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    async with open_store(url) as store:
        await populate(store)
    return url


async def registration(url: str) -> object:
    async with open_store(url) as store:
        return await store.load_config()


async def test_without_a_terminal_it_needs_yes_then_forgets(tmp_path: Path) -> None:
    """No terminal and no `--yes`: exit 2 naming `--yes`, nothing forgotten. With `--yes`:
    exit 0, the registration shown then forgotten; again: exit 0, nothing to forget."""
    url = await registered(tmp_path)
    refused = run(tmp_path, "unpair", "--store", url)
    assert refused.code == 2, refused.describe()
    assert "pass --yes" in refused.stderr
    assert await registration(url) is not None

    done = run(tmp_path, "unpair", "--store", url, "--yes")
    assert done.code == 0, done.describe()
    assert "is registered with" in done.stdout
    assert "registration forgotten" in done.stdout
    assert await registration(url) is None

    again = run(tmp_path, "unpair", "--store", url, "--yes")
    assert again.code == 0
    assert "nothing to forget" in again.stdout


@pytest.mark.parametrize(("answer", "code"), [("n", 1), ("", 1), ("y", 0), ("YES", 0)])
async def test_it_asks_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str, code: int
) -> None:
    """On a terminal it asks; only y/yes forgets (exit 0), anything else keeps it (exit 1)."""
    url = await registered(tmp_path)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    asked: list[str] = []

    def ask(question: str) -> str:
        asked.append(question)
        return answer

    args = argparse.Namespace(store=url, yes=False)
    assert await cmd_unpair(args, ask) == code
    assert len(asked) == 1
    assert "[y/N]" in asked[0]
    assert (await registration(url) is None) is (code == 0)


def test_a_store_that_is_not_there_is_refused_and_not_made(tmp_path: Path) -> None:
    """A mistyped path: exit 2, nothing created."""
    path = tmp_path / "typo.db"
    result = run(tmp_path, "unpair", "--store", f"sqlite:///{path}", "--yes")
    assert result.code == 2
    assert "no SQLite store at" in result.stderr
    assert not path.exists()


def test_the_manuals_quick_start_runs_twice_in_one_folder(tmp_path: Path) -> None:
    """docs/unpair.md's quick start: each run's dev relay is a new origin, and the second run
    forgets the first one's registration and pairs again, in the same folder."""
    text = (ROOT / "docs" / "unpair.md").read_text()
    match = re.search(r"<!-- example: repeatable-quickstart -->\n```python\n(.*?)```", text, re.S)
    assert match is not None
    script = tmp_path / "quickstart.py"
    script.write_text(match.group(1))
    for _ in range(2):
        env = child_env(tmp_path / "state")
        result = asyncio.run(forked.run(str(script), env=env, cwd=tmp_path, within_s=90))
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["['chat-1']"]
    assert (tmp_path / "example-relay.db").exists()
