"""One threaded web server in its own process, driven by JSON lines on stdin, as
`replica_proc.py` drives an async one: the same commands, each handled on a request thread of
its own through `ThreadedRelayService` and a `SyncHost`.

    python tests/threaded_proc.py STORE_URL RELAY_URL LEASE_S HEARTBEAT_S
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from typing import Any

from examples.hermes import Sessions
from relay import PublisherOptions
from relay.threaded import ThreadedRelayService


def handle(relay: ThreadedRelayService, host: Sessions, c: dict[str, Any]) -> Any:
    op = c["op"]
    if op == "session":
        host.create(
            c["id"], c.get("profile", "default"), c.get("title", "Chat"), c.get("created_at")
        )
    elif op == "forget":
        host.sessions.pop(c["id"], None)
    elif op == "start":
        host.start_run(c["session"], c["stream"])
        relay.changed()
    elif op == "end":
        relay.note_terminal(c["stream"], c["phase"])
        host.end_run(c["stream"])
        relay.changed()
    elif op == "delete":
        host.sessions.pop(c["session"], None)
        relay.clear_deleted(c["session"], c.get("profile"))
    elif op == "presence":
        return relay.update_presence(c["body"], c.get("profile", "default"))
    elif op == "pair":
        return relay.pair(c["body"], c.get("profile", "default"), operator=True)
    elif op == "start_service":
        return relay.start()
    elif op == "flush":
        relay.flush()
    elif op == "changed":
        relay.changed()
    elif op == "owner":
        return relay.owner
    else:
        raise ValueError(f"unknown op {op!r}")
    return None


def main(store_url: str, relay_url: str, lease_s: float, beat_s: float) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    host = Sessions(["default", "work", "home"])
    relay = ThreadedRelayService(
        store_url,
        host,
        relay_url=relay_url,
        allow_insecure_loopback=True,
        publishing=PublisherOptions(lease_s=lease_s, heartbeat_s=beat_s),
    )
    relay.health()  # open the store before saying ready
    print(json.dumps({"ok": True, "ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "stop":
            break
        reply: dict[str, Any] = {}

        def request(command: dict[str, Any] = command, reply: dict[str, Any] = reply) -> None:
            try:
                reply.update(ok=True, result=handle(relay, host, command))
            except Exception as error:  # the test reads what went wrong
                reply.update(ok=False, error=f"{type(error).__name__}: {error}")

        thread = threading.Thread(target=request)  # one thread a request, as the server runs
        thread.start()
        thread.join()
        print(json.dumps(reply), flush=True)
    relay.stop()


if __name__ == "__main__":
    url, relay_url, lease, beat = sys.argv[1:5]
    main(url, relay_url, float(lease), float(beat))
