"""The JSON store removes the temp files of killed writers, and never a live writer's.

A write makes `.<name>.<pid>.<n>.tmp`, fsyncs it and renames it over its target under the state
dir's lock; a writer killed before its rename leaves the temp behind. Opening the store removes the
temps whose pid is gone, only while it holds the lock that every writer holds while its temp exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.store.files import open_json
from relay.store.files.io import stale_temps
from relay.store.files.lock import LOCK

pytestmark = pytest.mark.json


def dead_pid() -> int:
    """The pid of a process that has ended (and, for a moment, no other process has)."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def names(directory: Path) -> set[str]:
    return set(os.listdir(directory))


# A writer of another process: takes the state dir's lock, makes its temp file, says so, and
# renames the temp once it reads a line, or once another process waits for its lock.
WRITER = """
import fcntl, os, sys, time
state, temp = sys.argv[1], sys.argv[2]
fd = os.open(os.path.join(state, sys.argv[3]), os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
with open(os.path.join(state, temp), "w") as f:
    f.write("7\\n")
print("ready", flush=True)
if sys.argv[4] == "until-waited-for":
    # The store polls for the lock (flock has no timeout), so no waiter shows in /proc/locks:
    # it waits from the moment it holds the lock file open.
    lock, fds = os.path.realpath(os.path.join(state, sys.argv[3])), f"/proc/{os.getppid()}/fd"
    for _ in range(1000):
        if any(os.path.realpath(os.path.join(fds, n)) == lock for n in os.listdir(fds)):
            break
        time.sleep(0.01)
    else:
        sys.exit("nobody waited for the lock")
    time.sleep(0.05)
else:
    sys.stdin.readline()
os.replace(os.path.join(state, temp), os.path.join(state, "talaria-relay-revision"))
"""


@contextlib.contextmanager
def writer_process(state: Path, temp: str, wait: str) -> Iterator[subprocess.Popen[str]]:
    """A `WRITER` that holds its lock and its temp; killed (if still running) on the way out."""
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, str(state), temp, LOCK, wait],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as writer:
        try:
            assert writer.stdout is not None
            assert writer.stdout.readline() == "ready\n"
            yield writer
        finally:
            writer.kill()


async def test_open_removes_the_temp_files_of_dead_writers(tmp_path: Path) -> None:
    """Our temps of dead pids go on open; a live pid's temp, and files not ours, stay."""
    state = tmp_path / "state"
    store = await open_json(state)
    await store.allocate_revisions(1, 1_000)
    dead = dead_pid()
    stale = {
        f".talaria-relay-started.json.{dead}.3.tmp",
        f".talaria-relay-publisher-0123456789abcdef.pem.{dead}.0.tmp",
        ".talaria-relay.json.99999999.1.tmp",  # past any pid the kernel hands out
        f".talaria-relay-revision.{2**70}.0.tmp",
    }
    kept = {
        f".talaria-relay-deleted.json.{os.getpid()}.0.tmp",  # a live process's
        f".notes.txt.{dead}.0.tmp",  # not a file of ours
        "notes.txt",
    }
    for name in stale | kept:
        (state / name).write_text('{"version": 1, "pro')  # as a kill mid-write leaves it
    before = names(state)

    await open_json(state)

    assert names(state) == before - stale
    assert await (await open_json(state)).revision_floor() == 1_000


async def test_a_live_writers_temp_file_is_left_alone(tmp_path: Path) -> None:
    """A temp of a writer that is alive stays through an open; once it is killed, it goes."""
    state = tmp_path / "state"
    await open_json(state)
    with writer_process(state, "placeholder", "until-stdin") as writer:
        temp = f".talaria-relay-revision.{writer.pid}.0.tmp"
        (state / "placeholder").rename(state / temp)
        await open_json(state)
        assert temp in names(state)

    await open_json(state)

    assert temp not in names(state)
    assert not stale_temps(state)


async def test_removal_waits_for_the_lock(tmp_path: Path) -> None:
    """A temp whose pid means nothing here (another pid namespace) waits for its writer's lock.

    The writer renames its temp only once the opening store waits for its lock; had the store
    removed the temp without the lock, the rename would fail.
    """
    state = tmp_path / "state"
    await open_json(state)
    temp = f".talaria-relay-revision.{dead_pid()}.0.tmp"
    with writer_process(state, temp, "until-waited-for") as writer:
        store = await asyncio.wait_for(open_json(state), 30)
        assert await asyncio.to_thread(writer.wait, 30) == 0

    assert temp not in names(state)
    assert await store.revision_floor() == 7


async def test_a_profile_homes_stale_temp_goes_with_its_next_write(tmp_path: Path) -> None:
    """Minting a profile's identity in its home removes a killed writer's temp there."""
    home = tmp_path / "home"
    home.mkdir()
    dead = dead_pid()
    (home / f"..talaria-relay-profile-id.{dead}.0.tmp").write_text("pfi_0")
    (home / ".bashrc").write_text("")
    store = await open_json(tmp_path / "state", profile_home=lambda name: home)

    identity = await store.profile_identity("alpha")

    assert names(home) == {".bashrc", ".talaria-relay-profile-id"}
    assert (home / ".talaria-relay-profile-id").read_text() == f"{identity}\n"
