"""Durable file I/O for the JSON store: atomic, fsynced writes of private files.

A write makes `.<name>.<pid>.<n>.tmp` beside its target, fsyncs it, renames it over the target and
fsyncs the directory. The rename is atomic, so a target is always one whole version, never a
truncated one; a writer killed before its rename leaves only its temp file behind, which
`stale_temps` finds.

A change of several files (a pass's runs and revision floor; a rekey's keys) is all or nothing
across a kill, by a roll-forward journal: every file is staged and fsynced first, then the
journal (`.talaria-relay-journal.json`, itself renamed into place) lists the renames and
removals; only then are they done, and the journal removed. A writer killed before the journal
is in place leaves stale temps (the old state); one killed after it leaves a journal that the
next lock holder carries out (`roll_forward`) before it reads anything (the new state).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_temp_names = itertools.count()

# The temp files of a write. Only names of our own files: a profile home holds other programs'.
TEMP = re.compile(r"\.(?P<target>\.?talaria-relay[^/]*)\.(?P<pid>[1-9][0-9]*)\.[0-9]+\.tmp")
JOURNAL = ".talaria-relay-journal.json"


@dataclass(frozen=True, slots=True)
class Write:
    """Replace `path` by a 0600 file of `text` (its mtime `mtime_ns`, if given); None removes."""

    path: Path
    text: str | None
    mtime_ns: int | None = None


def read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def commit(directory: Path, writes: Sequence[Write]) -> None:
    """Carry out `writes` in order, all or none across a kill (one alone needs no journal).

    Every new file is staged and fsynced before the first rename: a failure while writing
    changes none.
    """
    if not writes:
        return
    staged: list[tuple[Path | None, Path]] = []
    journal = directory / JOURNAL if len(writes) > 1 else None
    try:
        for w in writes:
            staged.append((None if w.text is None else stage(w.path, w.text, w.mtime_ns), w.path))
        if journal is not None:
            moves = [[None if t is None else str(t), str(p)] for t, p in staged]
            os.replace(stage(journal, json.dumps({"version": 1, "moves": moves}) + "\n"), journal)
            fsync_dir(directory)  # the journal is durable before any move
        _carry_out(staged)
        for parent in {directory, *(path.parent for _, path in staged)}:
            fsync_dir(parent)  # every move is durable before the journal goes
        if journal is not None:
            # Not fsynced: a journal that comes back after a power cut finds its temps gone
            # and only repeats its removals, and the next change here makes its removal durable.
            journal.unlink()
    finally:
        for temp, _ in staged:
            if temp is not None:
                temp.unlink(missing_ok=True)  # gone already once renamed


def _carry_out(moves: Sequence[tuple[Path | None, Path]]) -> None:
    for temp, path in moves:
        if temp is None:
            path.unlink(missing_ok=True)
        else:
            os.replace(temp, path)


def roll_forward(directory: Path) -> None:
    """Finish the change a killed writer's journal lists, if any. The caller holds the exclusive
    lock, so the journal's writer is gone."""
    journal = directory / JOURNAL
    raw = read(journal)
    if raw is None:
        return
    moves: list[tuple[Path | None, Path]] = []
    with contextlib.suppress(ValueError, TypeError, KeyError):
        moves = [(None if t is None else Path(t), Path(p)) for t, p in json.loads(raw)["moves"]]
    # A temp already renamed is gone: its move was done before the kill.
    _carry_out([(t, p) for t, p in moves if t is None or t.exists()])
    for parent in {path.parent for _, path in moves}:
        fsync_dir(parent)
    journal.unlink()
    fsync_dir(directory)


def stage(path: Path, text: str, mtime_ns: int | None = None) -> Path:
    """A fsynced 0600 temp file beside `path` holding `text`, to be renamed over it."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{next(_temp_names)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, 0o600)  # the umask may have narrowed it
            handle.write(text.encode())
            handle.flush()
            if mtime_ns is not None:
                os.utime(fd, ns=(mtime_ns, mtime_ns))
            # Before the rename: otherwise a power loss could leave the new name on empty blocks.
            os.fsync(fd)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def fsync_dir(directory: Path) -> None:
    # A rename or unlink is durable only once its directory is.
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stale_temps(directory: Path) -> list[Path]:
    """The temp files in `directory` whose writer process is gone, by name."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    return [
        directory / name
        for name in names
        if (match := TEMP.fullmatch(name)) is not None and not _alive(int(match["pid"]))
    ]


def remove_stale(directory: Path) -> None:
    """Remove `directory`'s temp files of dead writers; the caller holds the exclusive lock.

    Every temp file is made by `commit`, which runs only under this lock and renames or removes
    its temp before the lock is let go (a journal's are renamed by `roll_forward` first). So while
    we hold the lock, no writer anywhere is between making a temp and renaming it: a temp found
    now is a writer's that died holding the lock (the kernel let go of the lock with the process).
    That holds even for a writer in another pid namespace sharing the directory, whose pids mean
    nothing here. The pid check comes on top, and only ever keeps a file: a live pid may be a
    writer that takes no lock (a program of another version), or just a reused pid, whose stale
    temp then waits for a later open, costing a small file.
    """
    for temp in stale_temps(directory):
        temp.unlink(missing_ok=True)
    # No directory fsync: a removal lost to a power cut leaves a stale temp the next open
    # removes again.


def _alive(pid: int) -> bool:
    """Whether a process `pid` exists (ours, another user's, or one that reused a dead pid)."""
    try:
        os.kill(pid, 0)  # signal 0: nothing is sent, only whether the process exists
    except (ProcessLookupError, OverflowError):  # none, or past any pid the kernel hands out
        return False
    except PermissionError:
        return True  # it exists, as another user
    return True
