"""`talaria-relay demo`: the publisher's whole life against a relay, said step by step
(docs/operating.md lists the steps). It succeeds only when the relay accepted every request."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx

from relay.cli.status import collect, render
from relay.client import UNREACHABLE, describe
from relay.errors import InvalidInputError, RelayUnreachableError
from relay.protocol import REQUEST_TIMEOUT_S, validated_origin
from relay.publishing.options import PublisherOptions
from relay.service import RelayService
from relay.store import RelayStore, StoreTarget, migrations, open_store, resolve
from relay.store.url import default_sqlite_path
from relay.testing import DevRelay, MemoryHost, serve
from relay.testing.server import uvicorn_module

Say = Callable[[str], None]


def default_demo_url() -> str:
    """A demo store beside the embedded default, so a demo never touches a real registration."""
    return f"sqlite:///{default_sqlite_path().with_name('demo.db')}"


@dataclass
class Responses:
    """Every answer the relay gave; the demo passes only if each was a success."""

    failures: list[str] = field(default_factory=list)
    count: int = 0

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(event_hooks={"response": [self.record]})

    async def record(self, response: httpx.Response) -> None:
        self.count += 1
        if not response.is_success:
            self.failures.append(
                f"{response.request.method} {response.url.path}: {response.status_code}"
            )


@dataclass
class Demo:
    store: RelayStore
    relay_url: str
    http: httpx.AsyncClient
    host: MemoryHost
    say: Say
    insecure: bool
    service: RelayService | None = None

    def new_service(self) -> RelayService:
        self.service = RelayService(
            self.store,
            self.host,
            relay_url=self.relay_url,
            allow_insecure_loopback=self.insecure,
            http=self.http,
            log=lambda line: self.say(f"    {line}"),
            publishing=PublisherOptions(background=False),
        )
        return self.service

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop()

    async def publish(self, what: str) -> None:
        assert self.service is not None
        publisher = self.service.current()
        assert publisher is not None
        delay = await publisher.run_once()
        self.say(f"  published: {what}" + ("" if delay is None else " (failed; see above)"))

    async def end(self, stream: str, phase: str, what: str) -> None:
        assert self.service is not None
        await self.service.note_terminal(stream, phase)
        self.host.end_run(stream)
        await self.publish(what)


async def run(
    store_url: str | None,
    *,
    relay_url: str | None = None,
    invitations: Sequence[str] = (),
    allow_insecure_loopback: bool = False,
    mint_invitations: bool = False,
    replicas: int = 0,
    skip_if_registered: bool = False,
    say: Say = print,
) -> bool:
    """Run the demo; True when the relay accepted and verified every request.

    Only `store_url` names a store to write: `$TALARIA_RELAY_STORE_URL` names the real one, which
    a demo must not register. The store must be empty, or with `skip_if_registered` registered
    (then left as it is: compose runs the demo on every `up`)."""
    target = resolve(store_url or default_demo_url())
    if replicas and target.backend == "memory":
        raise InvalidInputError("replica processes cannot share a memory:// store")
    if relay_url is None:
        uvicorn_module()  # without the `devrelay` extra: say so before the store is reset
        await _fresh(target, say)
    if await _skipped(target, skip_if_registered, say):
        return True
    responses = Responses()
    async with AsyncExitStack() as stack:
        relay: DevRelay | None = None
        if relay_url is None:
            relay = DevRelay()
            relay_url = await stack.enter_async_context(serve(relay))
            invitations = [relay.mint_invitation("usr_owner"), relay.mint_invitation("usr_work")]
            allow_insecure_loopback = True
            say(f"dev relay listening on {relay_url}")
        elif mint_invitations:
            invitations = [await _mint(relay_url, user) for user in ("usr_owner", "usr_work")]
            say(f"minted {len(invitations)} invitations at {relay_url}/admin/invitations")
        if target.url is not None:
            await migrations.upgrade(target)
            say(f"store {target.display} migrated to {migrations.HEAD}")
        http = await stack.enter_async_context(responses.client())
        store = await stack.enter_async_context(open_store(_address(target)))
        profiles = ["default", "work", *(f"profile-{n}" for n in range(3, len(invitations) + 1))]
        demo = Demo(store, relay_url, http, MemoryHost(profiles), say, allow_insecure_loopback)
        # A clean stop, however the demo ends: its fleet row stops counting as live at once.
        stack.push_async_callback(demo.stop)
        await _pair(demo, profiles, invitations)
        await _sessions(demo)
        if replicas and not await _replicas(
            target, relay_url, allow_insecure_loopback, replicas, say
        ):
            responses.failures.append("a replica process failed")
        await _restart(demo)
        # End the turn still running and stop before the store is shown: a live turn's row
        # keeps its lease past a stop, and `status` would list the exited demo as live till then.
        await demo.end("stream-review", "completed", "chat-review completed")
        await demo.stop()
        say("the service stopped: no lease of it lives on")
        if relay is not None:
            _table(relay.state(), say)
        elif mint_invitations:
            state = await _admin(relay_url, "GET", "/admin/state")
            _table(state.raise_for_status().json(), say)
        say("")
        say("what the store holds")
        say(render(await collect(store)))
    say("")
    if responses.failures:
        say(f"FAILED: the relay refused {len(responses.failures)} of {responses.count} requests:")
        for failure in responses.failures:
            say(f"  {failure}")
        return False
    say(f"OK: the relay accepted and verified all {responses.count} requests")
    return True


async def _skipped(target: StoreTarget, skip_if_registered: bool, say: Say) -> bool:
    """True when the store holds a registration to skip; one that holds anything is refused."""
    if (held := await holdings(target)) is None:
        return False
    registered = held.startswith("a registration")
    if skip_if_registered and registered:
        say(f"{target.display} already holds {held}: registration skipped")
        return True
    way_out = "give it an empty or new --store"
    if registered:
        way_out = "add --skip-if-registered to leave it as it is and exit 0, or " + way_out
    raise InvalidInputError(
        f"{target.display} already holds {held}: the demo writes only into an empty store "
        f"({way_out})"
    )


async def _fresh(target: StoreTarget, say: Say) -> None:
    """A new dev relay knows no registration: start the default demo store afresh too."""
    if target.backend == "sqlite" and target.path == resolve(default_demo_url()).path:
        assert target.path is not None
        for suffix in ("", "-wal", "-shm"):
            target.path.with_name(target.path.name + suffix).unlink(missing_ok=True)
        say(f"demo store {target.display} reset")


async def holdings(target: StoreTarget) -> str | None:
    """What the store at `target` holds already, or None when it is empty or not there yet."""
    if target.backend == "memory" or (target.path is not None and not target.path.exists()):
        return None
    if target.url is not None:
        current = (await migrations.standing(target)).current
        if current is None:
            return None
        if current != migrations.HEAD:
            return f"a relay schema at revision {current}"
    async with open_store(_address(target)) as store:
        if (config := await store.load_config()) is not None:
            return f"a registration with {config.url}"
        held = {
            "profile identities": len(await store.identities()),
            "revisions": await store.revision_floor(),
            "started sessions": len(await store.started_ledger()),
            "deleted sessions": len(await store.pending_deleted()),
            "presence leases": len(await store.presence_leases()),
        }
    return ", ".join(name for name, count in held.items() if count) or None


async def _admin(relay_url: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    origin = validated_origin(relay_url)  # no credentials to send along, nor to print
    try:
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:
            return await http.request(method, f"{origin}{path}", **kwargs)
    except httpx.TransportError as exc:
        raise RelayUnreachableError(f"{UNREACHABLE}: {describe(exc)}") from exc


async def _mint(relay_url: str, user: str) -> str:
    """An invitation from a dev relay's admin endpoint (a real relay's come from its app)."""
    response = await _admin(relay_url, "POST", "/admin/invitations", json={"userId": user})
    if response.status_code != 201:
        raise InvalidInputError(
            f"{validated_origin(relay_url)} minted no invitation (HTTP {response.status_code}): "
            "is it a dev relay?"
        )
    return str(response.json()["invitation"])


def _address(target: StoreTarget) -> str:
    return (
        target.display if target.url is None else target.url.render_as_string(hide_password=False)
    )


async def _pair(demo: Demo, profiles: list[str], invitations: Sequence[str]) -> None:
    service = demo.new_service()
    await service.start()
    for index, invitation in enumerate(invitations):
        body = {
            "relay_url": demo.relay_url,
            "publisher_id": "http://hermes-demo.localhost",
            "publisher_invitation": invitation,
            "label": "talaria-relay demo",
        }
        await service.pair(body, profiles[index], operator=index == 0)
        verb = "registered the server with" if index == 0 else "enrolled profile"
        demo.say(f"{verb} {profiles[index] if index else demo.relay_url}")


async def _sessions(demo: Demo) -> None:
    host, service = demo.host, demo.service
    assert service is not None
    demo.say("default: a chat starts, waits for approval and completes")
    host.create_session("chat-plan", "default", "Plan the launch")
    host.start_run("chat-plan", "stream-plan", phase="agent_starting")
    await demo.publish("chat-plan starting")
    host.set_run_phase("stream-plan", "running")
    host.set_pending("chat-plan", approval=True)
    await demo.publish("chat-plan waiting for approval")
    host.set_pending("chat-plan")
    await demo.end("stream-plan", "completed", "chat-plan completed")
    demo.say("work: a browser tab is open, so its alerts are muted")
    await service.update_presence({"tab_id": "demo-tab-1", "active": True, "seq": 1}, "work")
    host.create_session("chat-review", "work", "Review the draft")
    host.start_run("chat-review", "stream-review")
    await demo.publish("chat-review running, alerts muted")
    demo.say("default: the finished chat is viewed")
    await service.mark_viewed("chat-plan")
    await demo.publish("chat-plan acknowledged")
    demo.say("default: a failed chat is deleted")
    host.create_session("chat-old", "default", "Old notes")
    host.start_run("chat-old", "stream-old")
    await demo.end("stream-old", "failed", "chat-old failed")
    host.delete_session("chat-old")
    await service.clear_deleted("chat-old", "default")
    await demo.publish("chat-old cleared")


async def _restart(demo: Demo) -> None:
    floor = await demo.store.revision_floor()
    await demo.stop()
    demo.say("the service restarts from the store")
    await demo.new_service().start()
    await demo.publish("after the restart")
    demo.say(f"  revisions continue above {floor}: now {await demo.store.revision_floor()}")


async def _replicas(
    target: StoreTarget, relay_url: str, insecure: bool, count: int, say: Say
) -> bool:
    say(f"{count} replica processes publish on the same store")
    command = [sys.executable, "-m", "relay.cli.demo", "--store", _address(target)]
    command += ["--relay-url", relay_url] + (["--allow-insecure-loopback"] if insecure else [])
    children = [
        await asyncio.create_subprocess_exec(*command, "--index", str(index))
        for index in range(count)
    ]
    codes = [await child.wait() for child in children]
    say(f"  replicas exited with {codes}")
    return not any(codes)


async def replica(store_url: str, relay_url: str, index: int, insecure: bool) -> bool:
    """One replica process: resume the registration, publish a session of its own, exit."""
    responses = Responses()
    async with responses.client() as http, open_store(store_url) as store:
        host = MemoryHost(["default", "work"])
        demo = Demo(store, relay_url, http, host, lambda line: None, insecure)
        if not await demo.new_service().start():
            return False
        session = f"replica-{index}"
        host.create_session(session, "default", f"Replica {index} chat")
        host.start_run(session, f"stream-{session}")
        await demo.publish(session)
        await demo.end(f"stream-{session}", "completed", session)
        await demo.stop()
    return responses.count > 0 and not responses.failures


def _table(state: dict[str, Any], say: Say) -> None:
    """The rows the relay holds, as it reports them, not as our side thinks."""
    say("")
    say("what the relay holds")
    say(f"  {'profile':<38} {'session':<14} {'phase':<22} {'revision':>15}  alerts  viewed")
    for grant in state["grants"]:
        for row in grant["rows"]:
            alerts = "muted" if row.get("alertEligible") is False else "on"
            viewed = {True: "yes", False: "no", None: "-"}[row.get("acknowledged")]
            say(
                f"  {grant['profileId']:<38} {row['sessionId']:<14} {row['phase']:<22}"
                f" {row['revision']:>15}  {alerts:<6}  {viewed}"
            )
    announced = Counter(event["sessionId"] for event in state["started"])
    once = all(count == 1 for count in announced.values())
    shown = ", ".join(s if n == 1 else f"{s} ({n} times)" for s, n in sorted(announced.items()))
    say(f"  sessions announced{' once each' if once else ''}: {shown or 'none'}")


def replica_parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(prog="python -m relay.cli.demo")
    options.add_argument("--store", required=True)
    options.add_argument("--relay-url", required=True)
    options.add_argument("--index", type=int, required=True)
    options.add_argument("--allow-insecure-loopback", action="store_true")
    return options


if __name__ == "__main__":
    given = replica_parser().parse_args()
    passed = asyncio.run(
        replica(given.store, given.relay_url, given.index, given.allow_insecure_loopback)
    )
    sys.exit(0 if passed else 1)
