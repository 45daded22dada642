"""Durable file I/O for the JSON store: atomic, fsynced writes of private files."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

_temp_names = itertools.count()


# ── files ─────────────────────────────────────────────────────────────────────


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write(path: Path, text: str, mtime_ns: int | None = None) -> None:
    """Replace `path` atomically and durably by a 0600 file; on failure the old file stays."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{next(_temp_names)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, 0o600)  # the umask may have narrowed it
            handle.write(text.encode())
            handle.flush()
            if mtime_ns is not None:
                os.utime(fd, ns=(mtime_ns, mtime_ns))
            os.fsync(fd)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # A rename or unlink is durable only once its directory is.
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
