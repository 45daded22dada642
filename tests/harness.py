"""A web app, its relay service and a dev relay on one store, with a clock the test moves.

Passes run only when a test asks (`await env.publish()`), so what the relay received is exact.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from relay import PublisherOptions
from relay.client import RelayClient
from relay.publishing.publisher import RelayPublisher
from relay.service import RelayService
from relay.store import RelayConfig, RelayStore
from relay.testing import Clock, DevRelay, MemoryHost, RecordedRequest, route_of

RELAY_URL = "https://relay.example"
PUBLISHER_ID = "https://hermes.example"


class Stall:
    """Every request to one route held at the wire until released, each by its path; counts
    how many are in flight (arrived, not yet answered) at once."""

    def __init__(self) -> None:
        self.held: dict[str, asyncio.Event] = {}  # by path: requests waiting to be released
        self.answered: list[str] = []  # paths, in the order the relay's answers came back
        self.in_flight = 0
        self.most_in_flight = 0
        self.open = False
        self._changed = asyncio.Condition()

    def release(self, path: str | None = None) -> None:
        """Let the request held for `path` go on to the relay; without a path, every request,
        now and from now on."""
        if path is None:
            self.open = True
        for waiting in [path] if path is not None else list(self.held):
            self.held.pop(waiting).set()

    async def until(self, done: Callable[[Stall], bool]) -> None:
        """Wait until `done(self)` holds; fail after 5 s (what never happens, say, a PUT never
        sent while others are held)."""
        async with asyncio.timeout(5), self._changed:
            await self._changed.wait_for(lambda: done(self))

    async def through(
        self, path: str, forward: Callable[[], Awaitable[httpx.Response]]
    ) -> httpx.Response:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if not self.open:
                gate = self.held[path] = asyncio.Event()
                await self._notify()
                await gate.wait()
            return await forward()
        finally:
            self.in_flight -= 1
            self.answered.append(path)
            await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


class Wire(httpx.AsyncBaseTransport):
    """Between the services and the dev relay: records attempts; fails, answers, holds or diverts
    one."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        # Real sockets, for requests diverted to a loopback server that misbehaves.
        self.network = httpx.AsyncHTTPTransport(retries=0)
        self.diversions: dict[str, list[str]] = {}
        self.requests: list[httpx.Request] = []
        self.attempts: list[tuple[str | None, bytes]] = []
        self.failures: dict[str, list[type[httpx.TransportError]]] = {}
        self.failed: list[str] = []
        self.replies: dict[str, httpx.Response] = {}
        self.gates: dict[str, asyncio.Event] = {}
        self.held = asyncio.Event()
        self.stalls: dict[str, Stall] = {}

    def fail(self, route: str, error: type[httpx.TransportError]) -> None:
        """The next request to `route` never reaches the relay: it raises `error`."""
        self.failures.setdefault(route, []).append(error)

    def answer(self, route: str, status: int, payload: dict[str, Any]) -> None:
        """Answer the next request to `route` with `payload` instead of the dev relay."""
        self.replies[route] = httpx.Response(status, json=payload)

    def divert(self, route: str, origin: str) -> None:
        """Send the next request to `route` to `origin` (a loopback server) over a real socket,
        with its method, path, headers, body and timeouts unchanged."""
        self.diversions.setdefault(route, []).append(origin)

    def hold(self, route: str) -> asyncio.Event:
        """Hold the next request to `route` until the returned event is set."""
        gate = asyncio.Event()
        self.gates[route] = gate
        self.held.clear()
        return gate

    def stall(self, route: str) -> Stall:
        """Hold every request to `route` from now on, each until the stall releases it."""
        stall = self.stalls[route] = Stall()
        return stall

    def bodies(self, route: str) -> list[dict[str, Any]]:
        """The JSON bodies of every attempt at `route`, reached the relay or not."""
        return [json.loads(body) for r, body in self.attempts if r == route]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        route = route_of(request.method, request.url.raw_path.decode("ascii").partition("?")[0])
        self.requests.append(request)
        self.attempts.append((route, request.content))
        if route is not None and self.failures.get(route):
            self.failed.append(route)
            raise self.failures[route].pop(0)("injected failure", request=request)
        if route is not None and (reply := self.replies.pop(route, None)) is not None:
            return reply
        if route is not None and self.diversions.get(route):
            origin = self.diversions[route].pop(0)
            diverted = httpx.Request(
                request.method,
                origin + request.url.raw_path.decode("ascii"),
                headers=request.headers,
                content=request.content,
                extensions=request.extensions,
            )
            return await self.network.handle_async_request(diverted)
        gate = self.gates.pop(route, None) if route is not None else None
        if gate is not None:
            self.held.set()
            await gate.wait()
        if route is not None and (stall := self.stalls.get(route)) is not None:
            path = request.url.raw_path.decode("ascii").partition("?")[0]
            return await stall.through(path, lambda: self.inner.handle_async_request(request))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.network.aclose()
        await self.inner.aclose()


@dataclass
class Env:
    store: RelayStore
    host: MemoryHost
    relay: DevRelay
    http: httpx.AsyncClient
    wire: Wire
    clock: Clock
    service: RelayService
    logs: list[str] = field(default_factory=list)

    def new_service(self, **options: Any) -> RelayService:
        """Another service on the same store and relay: a restart, or another replica."""
        return make_service(self, **options)

    async def publisher_with(self, client: RelayClient, owner: str) -> RelayPublisher:
        """A publisher of the saved registration sending through `client` (say, an impatient
        one): passes run only when the test asks; the test stops it."""
        publisher = RelayPublisher(
            await self.config(),
            store=self.store,
            host=self.host,
            client=client,
            presence=self.service.presence,
            owner=owner,
            clock=self.clock,
            log=self.logs.append,
            options=PublisherOptions(background=False, uniform=lambda _low, _high: 1.0),
        )
        await publisher.initialize()
        return publisher

    @property
    def publisher(self) -> RelayPublisher:
        publisher = self.service.current()
        assert publisher is not None, "no publisher: register first"
        return publisher

    async def config(self) -> RelayConfig:
        config = await self.store.load_config()
        assert config is not None
        return config

    async def profile_id(self, profile: str = "default") -> str:
        """The relay scope the registration gives `profile`."""
        return (await self.config()).profiles[profile].profile_id

    async def pair(
        self,
        profile: str = "default",
        *,
        user: str = "usr_owner",
        operator: bool = True,
        **body: Any,
    ) -> dict[str, Any]:
        """Register the server (first call) or enroll `profile` with an invitation for `user`."""
        request = {
            "relay_url": RELAY_URL,
            "publisher_id": PUBLISHER_ID,
            "publisher_invitation": self.relay.mint_invitation(user),
            **body,
        }
        return await self.service.pair(request, profile, operator=operator)

    async def publish(self) -> float | None:
        """One publisher pass, now; the backoff delay it asks for after a failure."""
        return await self.publisher.run_once()

    def sent(self, route: str) -> list[RecordedRequest]:
        """Requests of one route the relay received (any status)."""
        return [request for request in self.relay.requests if request.route == route]

    def accepted(self, route: str) -> list[RecordedRequest]:
        return [request for request in self.sent(route) if 200 <= request.status < 300]


def make_service(
    env: Env,
    *,
    clock: Callable[[], float] | None = None,
    host: MemoryHost | None = None,
    owner: str | None = None,
    uniform: Callable[[float, float], float] = lambda _low, _high: 1.0,
) -> RelayService:
    """A service like the env's; `clock` (say, a skewed one), `host` (another replica's web app)
    and `owner` (a replica's name) instead of the env's; `uniform`, its retry jitter (none)."""
    return RelayService(
        env.store,
        host or env.host,
        relay_url=RELAY_URL,
        http=env.http,
        clock=clock or env.clock,
        log=env.logs.append,
        owner=owner,
        publishing=PublisherOptions(background=False, uniform=uniform),
        # The test moves its clock by hand: that clock decides, on Postgres too.
        store_time=False,
    )


@asynccontextmanager
async def relay_env(
    store: RelayStore, *, profiles: tuple[str, ...] = ("default",)
) -> AsyncIterator[Env]:
    """Everything wired in process: the service talks to the dev relay through ASGI."""
    clock = Clock()
    relay = DevRelay(clock=clock)
    wire = Wire(httpx.ASGITransport(app=relay))
    async with httpx.AsyncClient(transport=wire) as http:
        host = MemoryHost(profiles, clock=clock)
        env = Env(store, host, relay, http, wire, clock, service=None)  # type: ignore[arg-type]
        env.service = make_service(env)
        # Started as a web app starts it; on a store with no registration it has no publisher yet.
        await env.service.start()
        try:
            yield env
        finally:
            await env.service.stop()


@asynccontextmanager
async def restarted(env: Env, **options: Any) -> AsyncIterator[RelayPublisher]:
    """A restarted service on the same store (a new process, so a new claim owner)."""
    service = env.new_service(**options)
    assert await service.start()
    publisher = service.current()
    assert publisher is not None
    try:
        yield publisher
    finally:
        await service.stop()
