"""Real child processes without an interpreter start each: forked from a server that imported the
library once, with their own stdin, stdout and stderr.

An interpreter start and the library's imports cost about half a second of CPU; the crash, kill
and replica tests start hundreds of processes. `start()` runs a script (or `-m` a module) as
`__main__` in a child of multiprocessing's fork server, a fresh single-threaded process that
preloaded the library, so a fork of it is as clean as a spawn. The child is a real process: it is
killed with SIGKILL, its exit code is its own, and nothing of the test's process is in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import runpy
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from multiprocessing import reduction
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

# Imported by the fork server once, before its first fork (`__main__`: pytest, which each child
# would import again otherwise).
PRELOAD = [
    "__main__",
    "relay",
    "relay.store",
    "relay.service",
    "relay.cli",
    "crash_writer",
    "mp_workers",
]


def context() -> multiprocessing.context.ForkServerContext:
    """The fork server every test process starts its children from."""
    forkserver = multiprocessing.get_context("forkserver")
    forkserver.set_forkserver_preload(PRELOAD)
    return forkserver


def _child(
    target: str,
    module: bool,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    stdio: socket.socket,
    stderr: socket.socket | _Inherited,
) -> None:
    os.dup2(stdio.fileno(), 0)
    os.dup2(stdio.fileno(), 1)
    os.dup2(stderr.fileno(), 2)
    stdio.close()
    stderr.close()
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own, for its lifetime
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    # What the interpreter's own start would do: default signals, the script's argv and path.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [target, *argv]
    if module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, str(Path(target).parent))
        runpy.run_path(target, run_name="__main__")


class _Inherited:
    """A descriptor of this process handed to the child (as a subprocess inherits one)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Pickled while the child is being spawned: the fork server passes the descriptor on.
        return (_Inherited._received, (reduction.DupFd(self.fd),))

    @staticmethod
    def _received(handle: Any) -> _Inherited:
        return _Inherited(handle.detach())

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        os.close(self.fd)


class Child:
    """`asyncio.subprocess.Process`'s face over a forked child."""

    def __init__(
        self,
        process: BaseProcess,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader | None,
        stderr_end: asyncio.StreamWriter | None,
    ) -> None:
        self._process = process
        self._stderr_end = stderr_end
        self._joined: asyncio.Future[None] | None = None
        assert process.pid is not None
        self.pid: int = process.pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr

    @property
    def captured_stderr(self) -> asyncio.StreamReader:
        assert self.stderr is not None, "started without capture_stderr"
        return self.stderr

    @property
    def returncode(self) -> int | None:
        # Asked only when no join is pending: the exit code is read off a pipe once, and two
        # readers at once would leave one of them without it.
        if self._joined is not None and not self._joined.done():
            return None
        return self._process.exitcode

    async def wait(self) -> int:
        # One join for every waiter: a second one polling the same sentinel would read its end.
        if self._joined is None:
            self._joined = asyncio.ensure_future(asyncio.to_thread(self._process.join))
        await asyncio.shield(self._joined)
        self.stdin.close()
        if self._stderr_end is not None:
            self._stderr_end.close()
        code = self._process.exitcode
        assert code is not None
        return code

    def kill(self) -> None:
        # Not after it was reaped: the pid may be another process's by then.
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


async def start(
    target: str | Path,
    *argv: str,
    module: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    capture_stderr: bool = True,
) -> Child:
    """Run `target` (a script's path, or with `module` a module's name) with `argv` in a child;
    its stderr is `Child.stderr`, or without `capture_stderr` this process's own."""
    ours, theirs = socket.socketpair()
    errors_ours, errors_theirs = socket.socketpair() if capture_stderr else (None, None)
    with theirs, errors_theirs or contextlib.nullcontext():
        process = context().Process(
            target=_child,
            args=(
                str(target),
                module,
                list(argv),
                dict(os.environ if env is None else env),
                str(cwd or os.getcwd()),
                theirs,
                errors_theirs or _Inherited(2),
            ),
            daemon=True,  # ended with the test process, whatever the test left running
        )
        process.start()
    stdout, stdin = await _streams(ours)
    if errors_ours is None:
        return Child(process, stdin, stdout, None, None)
    stderr, errors = await _streams(errors_ours)
    return Child(process, stdin, stdout, stderr, errors)


class _ClosedAtEof(asyncio.StreamReaderProtocol):
    def eof_received(self) -> bool:
        super().eof_received()
        return False  # the child has gone (or closed its end): nothing more to read or write


async def _streams(sock: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The child's end as streams, closed once it is: a child killed and never waited for
    leaves no transport open."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    protocol = _ClosedAtEof(reader)
    transport, _ = await loop.create_unix_connection(lambda: protocol, sock=sock)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def run(
    target: str,
    *argv: str,
    module: bool = False,
    env: Mapping[str, str],
    cwd: str | Path,
    within_s: float,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(..., capture_output=True, text=True)` for a forked child: run to its end
    (killed past `within_s`), its exit code and output."""
    process = await start(target, *argv, module=module, env=env, cwd=cwd)
    output = asyncio.gather(process.stdout.read(), process.captured_stderr.read())
    try:
        stdout, stderr = await asyncio.wait_for(output, within_s)
    finally:
        process.kill()
    code = await process.wait()
    args = [target, *argv]
    return subprocess.CompletedProcess(args, code, stdout.decode(), stderr.decode())
