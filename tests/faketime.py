"""Child processes whose wall clock is off by a set number of seconds: Debian's libfaketime.

A process started with `LD_PRELOAD` of `libfaketime.so.1` and `FAKETIME=+60s` sees every
wall-clock read (`time.time()`, `datetime.now()`) a minute ahead, as a replica on a host whose
NTP broke does. Only the monotonic clock is left alone (`FAKETIME_DONT_FAKE_MONOTONIC=1`): with
it faked too, threading waits with a timeout hang. Pitfall of libfaketime 0.9.10 (Debian
bookworm) with that setting: Python 3.11's `time.sleep` raises `OSError` (libfaketime #426);
asyncio's and threading's waits work, and the replica process uses only those.

The library is preloaded when a program starts, so these are real `exec`s of the interpreter,
never forks of the test's fork server (`forked.py`).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

# Where Debian's `libfaketime` package installs it (apt-get install faketime).
CANDIDATES = (
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/faketime/libfaketime.so.1"),
)


def library() -> Path:
    """The installed libfaketime; a test that needs it fails (in CI) or skips (elsewhere)."""
    for path in CANDIDATES:
        if path.exists():
            return path
    message = "libfaketime is not installed: apt-get install faketime"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def env(offset_s: float) -> dict[str, str]:
    """This process's environment, with the wall clock moved by `offset_s` seconds."""
    return {
        **os.environ,
        "LD_PRELOAD": str(library()),
        "FAKETIME": f"{offset_s:+g}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        # Read once: the offset never changes during a test.
        "FAKETIME_NO_CACHE": "0",
    }


async def start(script: Path, *argv: str, offset_s: float) -> asyncio.subprocess.Process:
    """`python script argv...` with its wall clock `offset_s` seconds off; stdin and stdout piped,
    stderr this process's own."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env(offset_s),
    )
