"""Run a worker body in several real processes that start their work at one barrier."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

import forked

TIMEOUT_S = 300


def run_processes(target: Callable[..., None], count: int, *args: Any) -> list[Any]:
    """Start `count` processes of `target(index, barrier, results, *args)`; return their results."""
    # Forked from a server that imported the workers' modules once: an interpreter start and the
    # library's imports cost about a second of CPU a process. The server is a fresh process of
    # its own, single-threaded, so a fork of it is as clean as a spawn (a fork of this one is not).
    context = forked.context()
    barrier = context.Barrier(count)
    results = context.Queue()
    processes = [
        context.Process(target=target, args=(index, barrier, results, *args))
        for index in range(count)
    ]
    for process in processes:
        process.start()
    collected: dict[int, Any] = {}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(collected) < count:
            try:
                index, value = results.get(timeout=0.5)
            except queue.Empty:
                codes = [p.exitcode for p in processes]
                # A worker that failed says so now, not after the others' deadline.
                if any(code not in (None, 0) for code in codes) or time.monotonic() > deadline:
                    raise AssertionError(
                        f"workers stopped without a result: exit codes {codes}"
                    ) from None
                continue
            collected[index] = value
    finally:
        # After a failure, the workers still waiting (at the barrier, on a lock) are killed.
        wait_s = max(0.0, deadline - time.monotonic()) if len(collected) == count else 1.0
        for process in processes:
            process.join(timeout=wait_s)
            if process.is_alive():
                process.kill()
                process.join()
    assert [p.exitcode for p in processes] == [0] * count
    return [collected[index] for index in range(count)]
