"""Real file-system faults, made with the kernel's own tools: a small tmpfs, a read-only bind
mount, the immutable attribute.

Root (or passwordless sudo) is needed, and root ignores file modes, so `chmod` cannot make a
file read-only for these tests: a read-only mount (EROFS) or `chattr +i` (EPERM, even for
root, even through a descriptor already open) can. Where neither works, the test is skipped
with the reason, so a CI runner that can mount runs it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    return subprocess.run([*prefix, *command], capture_output=True, text=True, check=False)


def _needs(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip()
        pytest.skip(f"cannot {what} here (needs root or passwordless sudo): {reason}")


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A fresh tmpfs of `size` (e.g. `4m`) mounted at `path`: a disk that can fill up."""
    path.mkdir(parents=True, exist_ok=True)
    owner = f"uid={os.getuid()},gid={os.getgid()},mode=0700"
    _needs(_run("mount", "-t", "tmpfs", "-o", f"size={size},{owner}", "tmpfs", str(path)), "mount")
    try:
        yield path
    finally:
        _run("umount", "-l", str(path))


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """`path` (a directory) read-only for everyone, root included, until the block ends."""
    _needs(_run("mount", "--bind", str(path), str(path)), "bind-mount")
    try:
        _needs(_run("mount", "-o", "remount,bind,ro", str(path)), "remount read-only")
        yield
    finally:
        _run("umount", "-l", str(path))


@contextlib.contextmanager
def immutable(*files: Path) -> Iterator[None]:
    """`files` unwritable (EPERM), even through descriptors already open, until the block ends."""
    done: list[Path] = []
    try:
        for file in files:
            _needs(_run("chattr", "+i", str(file)), "set the immutable attribute")
            done.append(file)
        yield
    finally:
        for file in done:
            _run("chattr", "-i", str(file))


def fill(directory: Path) -> Path:
    """Write a file into `directory` until its file system has no byte left; the file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1 << 9, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return filler
