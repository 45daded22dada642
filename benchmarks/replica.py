"""One bench replica in its own process, driven by JSON lines on stdin.

    python -m benchmarks.replica STORE_URL RELAY_URL OWNER PROFILES SESSIONS

Every replica hosts the same S sessions (the web app's sessions are shared); a turn runs on the
one the bench starts it on. Commands: `start` (session, stream), `end` (stream), `flush` (answers
once a pass that began after it is over), `stop`; at `stop` it prints its CPU seconds (user +
system) and exits.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys

from relay.service import RelayService
from relay.store import open_store
from relay.testing import MemoryHost


def profile_names(count: int) -> tuple[str, ...]:
    return ("default", *(f"p{n}" for n in range(1, count)))


def session_ids(sessions: int, profiles: tuple[str, ...]) -> list[tuple[str, str]]:
    """(session, profile) pairs, spread over the profiles in turn."""
    return [(f"s{n}", profiles[n % len(profiles)]) for n in range(sessions)]


async def main(store_url: str, relay_url: str, owner: str, profiles: int, sessions: int) -> None:
    names = profile_names(profiles)
    host = MemoryHost(names)
    for session, profile in session_ids(sessions, names):
        host.create_session(session, profile, f"Chat {session}")
    async with open_store(store_url) as store:
        service = RelayService(
            store, host, relay_url=relay_url, allow_insecure_loopback=True, owner=owner
        )
        await service.start()
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        print(json.dumps({"ready": owner}), flush=True)
        while line := await reader.readline():
            command = json.loads(line)
            if command["op"] == "start":
                host.start_run(command["session"], command["stream"])
            elif command["op"] == "end":
                await service.note_terminal(command["stream"], "completed")
                host.end_run(command["stream"])
            elif command["op"] == "flush":
                await service.flush()
                print(json.dumps({"flushed": owner}), flush=True)
                continue
            else:
                break
            service.changed()
        await service.stop()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"cpu_s": usage.ru_utime + usage.ru_stime}), flush=True)


if __name__ == "__main__":
    store, relay, name, p, s = sys.argv[1:6]
    asyncio.run(main(store, relay, name, int(p), int(s)))
