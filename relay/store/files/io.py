"""Durable file I/O for the JSON store: atomic, fsynced writes of private files.

A write makes `.<name>.<pid>.<n>.tmp` beside its target, fsyncs it, renames it over the target and
fsyncs the directory (a write of several files stages them all before the first rename). The
rename is atomic, so a target is always one whole version, never a truncated one; a writer killed
before its rename leaves only its temp file behind, which `stale_temps` finds.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Mapping
from pathlib import Path

_temp_names = itertools.count()

# `_write`'s temp files. Only names of our own files: a profile home holds other programs' files.
TEMP = re.compile(r"\.(?P<target>\.?talaria-relay[^/]*)\.(?P<pid>[1-9][0-9]*)\.[0-9]+\.tmp")


# ── files ─────────────────────────────────────────────────────────────────────


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write(path: Path, text: str, mtime_ns: int | None = None) -> None:
    """Replace `path` atomically and durably by a 0600 file; on failure the old file stays."""
    _write_all({path: text}, mtime_ns)


def _write_all(files: Mapping[Path, str], mtime_ns: int | None = None) -> None:
    """Replace each path by a 0600 file holding its text, durably.

    All are written and fsynced aside first, then renamed: a failure while writing changes none.
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for path, text in files.items():
            staged.append((_stage(path, text, mtime_ns), path))
        for temp, path in staged:
            os.replace(temp, path)
    finally:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)  # gone already once renamed
    for directory in {path.parent for path in files}:
        _fsync_dir(directory)


def _stage(path: Path, text: str, mtime_ns: int | None) -> Path:
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


def _fsync_dir(directory: Path) -> None:
    # A rename or unlink is durable only once its directory is.
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ── what a killed writer leaves behind ────────────────────────────────────────


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


def _alive(pid: int) -> bool:
    """Whether a process `pid` exists (ours, another user's, or one that reused a dead pid)."""
    try:
        os.kill(pid, 0)  # signal 0: nothing is sent, only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user
    except OverflowError:
        return False  # past any pid the kernel hands out
    return True
