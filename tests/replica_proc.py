"""One web-server replica in its own process, driven by JSON lines on stdin.

    python tests/replica_proc.py STORE_URL RELAY_URL OWNER LEASE_S HEARTBEAT_S

Each line is a command (`op` and its fields); each gets one line back, `{"ok": true, ...}` or
`{"ok": false, "error": ...}`. The web app's sessions live in a store every replica shares, so
the test sends `session` and `forget` to all of them; a turn runs on one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

from relay.service import RelayService
from relay.store import open_store
from relay.testing import MemoryHost


async def handle(service: RelayService, host: MemoryHost, command: dict[str, Any]) -> Any:
    op = command["op"]
    if op == "session":
        host.create_session(
            command["id"], command.get("profile", "default"), command.get("title", "Chat"),
            created_at=command.get("created_at"),
        )  # fmt: skip
    elif op == "forget":
        host.sessions.pop(command["id"], None)
    elif op == "start":
        host.start_run(command["session"], command["stream"], started_at=command.get("at"))
        service.changed()
    elif op == "end":
        await service.note_terminal(command["stream"], command["phase"])
        host.end_run(command["stream"])
        service.changed()
    elif op == "delete":
        host.sessions.pop(command["session"], None)
        await service.clear_deleted(command["session"], command.get("profile"))
    elif op == "presence":
        return await service.update_presence(command["body"], command.get("profile", "default"))
    elif op == "pair":
        return await service.pair(command["body"], command.get("profile", "default"))
    elif op == "start_service":
        return await service.start()
    elif op == "flush":
        await service.flush()
    elif op == "changed":
        service.changed()
    else:
        raise ValueError(f"unknown op {op!r}")
    return None


async def main(store_url: str, relay_url: str, owner: str, lease_s: float, beat_s: float) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    host = MemoryHost(["default", "work", "home"])
    async with open_store(store_url) as store:
        service = RelayService(
            store,
            host,
            relay_url=relay_url,
            allow_insecure_loopback=True,
            owner=owner,
            lease_s=lease_s,
            heartbeat_s=beat_s,
        )
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        print(json.dumps({"ok": True, "ready": owner}), flush=True)
        while line := await reader.readline():
            command = json.loads(line)
            if command["op"] == "stop":
                break
            try:
                reply = {"ok": True, "result": await handle(service, host, command)}
            except Exception as error:  # the test reads what went wrong
                reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
            print(json.dumps(reply), flush=True)
        await service.stop()


if __name__ == "__main__":
    url, relay, name, lease, beat = sys.argv[1:6]
    asyncio.run(main(url, relay, name, float(lease), float(beat)))
