"""A JSON write of several files is all or none across a kill: the roll-forward journal.

A pass's write changes the runs and the revision floor, two files and two renames. A writer
process is killed (SIGKILL) at a chosen point of that write: before its journal is in place (the
old state stays), or between the two renames (the journal finishes the new state, whoever takes
the lock next: an open, a reader, a writer).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from relay.store import open_store
from relay.store.files.io import JOURNAL, TEMP

pytestmark = pytest.mark.json

NOW = 1_800_000_000_000
# A writer that makes one pass write on the state dir and is killed (by itself, SIGKILL) at
# `point`: "staged" with its files staged, before the journal is renamed into place; "journal"
# with the journal in place, before any rename of a file; "renamed" after the first one.
WRITER = """
import asyncio, os, signal, sys
from relay.store import RunState, open_store
from relay.store.files.io import JOURNAL

state, point, now = sys.argv[1], sys.argv[2], int(sys.argv[3])
replace, renames = os.replace, []

def replace_or_die(src, dst):
    journal = str(dst).endswith(JOURNAL)
    if point == "staged" and journal:
        os.kill(os.getpid(), signal.SIGKILL)
    if not journal and renames:
        if len(renames) == {"journal": 1, "renamed": 2}[point]:
            os.kill(os.getpid(), signal.SIGKILL)
    if journal or renames:
        renames.append(dst)
    replace(src, dst)

os.replace = replace_or_die

async def main() -> None:
    async with open_store(f"json://{state}") as store:
        run = RunState("s1", "t1", "default", "Chat", "running", now, now, "A")
        await store.pass_write("A", [run], now, lease_ms=60_000, retention_ms=900_000)

asyncio.run(main())
"""


def killed_writer(state: Path, point: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(state), point, str(NOW)], check=False, timeout=60
    )
    assert done.returncode == -9


def temps(state: Path) -> list[str]:
    return [name for name in os.listdir(state) if TEMP.fullmatch(name)]


async def seeded(state: Path) -> int:
    """A state dir with a revision floor; the floor."""
    async with open_store(f"json://{state}") as store:
        return (await store.allocate_revisions(1, NOW - 10_000))[0]


@pytest.mark.parametrize("point", ["renamed", "journal"])
async def test_a_writer_killed_inside_a_change_of_two_files_is_finished_on_open(
    tmp_path: Path, point: str
) -> None:
    """Killed once its journal is in place (before or between the renames), the next open
    finishes the write: the run row and the raised floor are both there, no journal or temp."""
    state = tmp_path / "state"
    await seeded(state)
    killed_writer(state, point)
    assert (state / JOURNAL).exists()

    async with open_store(f"json://{state}") as store:
        assert not (state / JOURNAL).exists()
        assert temps(state) == []
        assert [run.session_id for run in await store.run_states()] == ["s1"]
        assert await store.revision_floor() == NOW


async def test_a_reader_finishes_a_killed_writers_change_before_it_reads(tmp_path: Path) -> None:
    """A store opened before the kill (so no open sweeps) finishes the journal on its next
    read, under the shared lock: it never reads the runs new and the floor old."""
    state = tmp_path / "state"
    await seeded(state)
    async with open_store(f"json://{state}") as store:
        killed_writer(state, "renamed")
        assert (state / JOURNAL).exists()
        assert await store.revision_floor() == NOW
        assert not (state / JOURNAL).exists()
        assert [run.session_id for run in await store.run_states()] == ["s1"]


async def test_a_writer_killed_before_its_journal_changes_nothing(tmp_path: Path) -> None:
    """Killed with its files staged but no journal, the write never happened: the old floor,
    no run row, and the next open removes the staged temps."""
    state = tmp_path / "state"
    floor = await seeded(state)
    killed_writer(state, "staged")
    assert not (state / JOURNAL).exists()
    assert temps(state) != []

    async with open_store(f"json://{state}") as store:
        assert temps(state) == []
        assert await store.run_states() == []
        assert await store.revision_floor() == floor
