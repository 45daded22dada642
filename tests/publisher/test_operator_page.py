"""The operator page and its JSON twin through both faces: who may read it, what it answers
with, what it shows, and what it never shows (key material, session titles)."""

from __future__ import annotations

import html
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from backends import MEMORY, on
from harness import Env, relay_env
from hostile import HOSTILE_NAMES
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount
from threaded_support import RelayThread, relay_thread

from relay import asgi, wsgi
from relay.operator import facts, page, strips
from relay.operator.judge import judge
from relay.routes import Caller, Operator
from relay.store import RelayStore, open_store
from relay.store.fleet import FleetMember
from relay.testing import MemoryHost
from relay.threaded import ThreadedRelayService

pytestmark = on(MEMORY)

OPERATOR = {"x-profile": "default", "x-operator": "1"}
MEMBER = {"x-profile": "default"}
SECURITY = {
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
    "referrer-policy": "no-referrer",
}


def who(headers: dict[str, str]) -> Caller | None:
    profile = headers.get("x-profile")
    return None if profile is None else Caller(profile, operator=headers.get("x-operator") == "1")


async def identify(request: Request) -> Caller | None:
    return who(dict(request.headers))


def is_operator(caller: Caller) -> bool:
    return caller.operator


@asynccontextmanager
async def web(
    env: Env, operator: Operator | None = is_operator, prefix: str = "/api/talaria"
) -> AsyncIterator[httpx.AsyncClient]:
    found = asgi.routes(env.service, identify, prefix=prefix, operator=operator)
    transport = httpx.ASGITransport(app=Starlette(routes=found))
    async with httpx.AsyncClient(transport=transport, base_url="http://web.test") as client:
        yield client


def secured(response: httpx.Response) -> None:
    for name, value in SECURITY.items():
        assert response.headers[name] == value
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src" not in csp
    assert "unsafe-inline" not in csp


async def gathered(env: Env) -> dict[str, Any]:
    """The document the service's page would show now (the gatherer's cache bypassed)."""
    return await facts.gather(env.service.store, int(env.clock() * 1000), env.service.own())


async def paired(env: Env, title: str = "a chat") -> None:
    await env.pair()
    env.host.create_session("s1", title=title)
    env.host.start_run("s1")
    assert await env.publish() is None


@pytest.mark.parametrize(
    "path", ["/api/talaria/relay/operator", "/api/talaria/relay/operator.json"]
)
async def test_nobody_gets_401_a_non_operator_403_both_with_the_headers(
    store: RelayStore, path: str
) -> None:
    """Without a caller 401, with a caller the predicate refuses 403; both JSON errors that
    carry the strict headers and say nothing of the relay state."""
    async with relay_env(store) as env, web(env) as client:
        await paired(env)
        nobody = await client.get(path)
        assert nobody.status_code == 401
        secured(nobody)
        member = await client.get(path, headers=MEMBER)
        assert member.status_code == 403
        assert member.json() == {"error": "Only an operator may read this page"}
        secured(member)


async def test_without_an_operator_predicate_nobody_is_an_operator(store: RelayStore) -> None:
    """An app that passes no `operator=` shows the page to nobody, not even `operator=True`."""
    async with relay_env(store) as env, web(env, operator=None) as client:
        await paired(env)
        response = await client.get("/api/talaria/relay/operator", headers=OPERATOR)
        assert response.status_code == 403
        secured(response)
        # Not "only an operator": the app gave no predicate, and the answer says which to pass.
        assert "no operator= predicate" in response.json()["error"]


async def test_an_operator_reads_the_page_and_its_json_twin(store: RelayStore) -> None:
    """The page is HTML with the headers, shows the relay, key id, fingerprint and profile; the
    JSON has the same registration; neither holds key material or a session title."""
    async with relay_env(store) as env, web(env) as client:
        await paired(env, title="Quarterly secret plan")
        html = await client.get("/api/talaria/relay/operator", headers=OPERATOR)
        assert html.status_code == 200
        assert html.headers["content-type"] == "text/html; charset=utf-8"
        secured(html)
        data = (await client.get("/api/talaria/relay/operator.json", headers=OPERATOR)).json()
        registration = data["registration"]
        assert registration["relay_url"] == "https://relay.example"
        assert registration["key_fingerprint"].startswith("SHA256:")
        assert registration["key_encrypted"] is False
        for shown in (registration["key_id"], registration["key_fingerprint"], "default"):
            assert shown in html.text
        assert "Publishing normally" in html.text
        (profile,) = data["profiles"]
        assert profile["enrolled"] is True
        assert profile["last_accepted"]["states"] == 1
        assert profile["outbox_depth"] == 0
        (replica,) = data["fleet"]["replicas"]
        assert replica["this_replica"] is True
        assert replica["owner"] == env.service.owner
        key = await store.load_key((await env.config()).key_ref)
        body = key.split("-----")[2].strip().splitlines()[0]
        for text in (html.text, json.dumps(data)):
            assert "PRIVATE KEY" not in text
            assert body not in text
            assert "Quarterly secret plan" not in text


async def test_the_page_is_read_only(store: RelayStore) -> None:
    """Any method but GET is 405: nothing on the page changes state."""
    async with relay_env(store) as env, web(env) as client:
        await paired(env)
        for method in ("POST", "PUT", "DELETE"):
            response = await client.request(method, "/api/talaria/relay/operator", headers=OPERATOR)
            assert response.status_code == 405


@pytest.mark.parametrize("name", HOSTILE_NAMES)
async def test_a_hostile_profile_name_is_shown_as_text(store: RelayStore, name: str) -> None:
    """A profile named with markup appears escaped: its text is on the page, no tag of it is."""
    async with relay_env(store, profiles=(name,)) as env, web(env) as client:
        await env.pair(profile=name)
        response = await client.get(
            "/api/talaria/relay/operator", headers={"x-profile": "x", "x-operator": "1"}
        )
        assert response.status_code == 200
        assert page._t(name) in response.text
        if page._t(name) != name:  # markup: only its escaped form is there
            assert name not in response.text


async def test_mounted_under_any_prefix_its_json_link_still_resolves(store: RelayStore) -> None:
    """Mounted at `/ops/relay-team`, the page answers there and links its JSON relatively."""
    async with relay_env(store) as env:
        await paired(env)
        mounted = Starlette(
            routes=[Mount("/ops/relay-team", asgi.app(env.service, identify, operator=is_operator))]
        )
        transport = httpx.ASGITransport(app=mounted)
        async with httpx.AsyncClient(transport=transport, base_url="http://web.test") as client:
            html = await client.get("/ops/relay-team/relay/operator", headers=OPERATOR)
            assert html.status_code == 200
            assert 'href="operator.json"' in html.text
            linked = str(html.url.join("operator.json"))
            assert (await client.get(linked, headers=OPERATOR)).status_code == 200


async def test_a_page_left_open_reads_the_store_once_per_refresh(
    store: RelayStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty requests inside `REFRESH_S` gather the facts once; after it, once more."""
    now = [0.0]
    calls: list[int] = []
    gather = facts.gather

    async def counted(store: RelayStore, now_ms: int, own: facts.Own, answer: bool) -> Any:
        calls.append(1)
        return await gather(store, now_ms, own, answer=answer)

    monkeypatch.setattr(facts, "gather", counted)
    async with relay_env(store) as env:
        await paired(env)
        gatherer = facts.Gatherer(env.service.store, env.service.own, env.clock, lambda: now[0])
        for _ in range(20):
            await gatherer()
        assert len(calls) == 1
        now[0] += facts.REFRESH_S
        await gatherer()
        assert len(calls) == 2


async def test_a_backing_off_replica_and_a_disabled_profile_are_named(store: RelayStore) -> None:
    """A 503 puts this replica in backoff (failure class, until when); a 403 on a later pass
    disables the profile with its reason; the verdict says which and why."""
    async with relay_env(store) as env:
        await paired(env)
        env.relay.inject("snapshot", 503)
        assert await env.publish() == 5.0
        document = await gathered(env)
        (replica,) = document["fleet"]["replicas"]
        assert replica["backoff_failure"] == "RelayHttpError"
        assert replica["backoff_until"] == int((env.clock() + 5.0) * 1000)
        level, _line, reasons = page.verdict(document)
        assert level == "bad"
        assert any("backing off: the relay answered HTTP 503" in reason for reason in reasons)
        env.clock.advance(10)
        env.relay.inject("snapshot", 403)
        await env.publish()
        document = await gathered(env)
        (profile,) = document["profiles"]
        assert profile["enrolled"] is False
        assert "HTTP 403" in profile["disabled_why"]
        assert "not publishing" in " ".join(page.verdict(document)[2])


# ── the WSGI face ─────────────────────────────────────────────────────────────


@pytest.fixture
def dev() -> Iterator[RelayThread]:
    with relay_thread() as relay:
        yield relay


@pytest.fixture
def threaded(dev: RelayThread) -> Iterator[ThreadedRelayService]:
    service = ThreadedRelayService(
        "memory://", MemoryHost(["default"]), relay_url=dev.url, allow_insecure_loopback=True
    )
    service.start()
    service.pair(
        {**dev.pairing(), "publisher_id": "https://wsgi.example"}, "default", operator=True
    )
    yield service
    service.stop()


def wsgi_client(
    service: ThreadedRelayService, operator: Callable[[Caller], bool] | None
) -> httpx.Client:
    def identify_wsgi(environ: dict[str, Any]) -> Caller | None:
        headers = {
            k[5:].lower().replace("_", "-"): v for k, v in environ.items() if k.startswith("HTTP_")
        }
        return who(headers)

    router = wsgi.Router(service, identify_wsgi, operator=operator)
    return httpx.Client(transport=httpx.WSGITransport(app=router), base_url="http://web.test")


def test_wsgi_refuses_and_serves_as_asgi_does(threaded: ThreadedRelayService) -> None:
    """Through WSGI: 401 for nobody, 403 for a member, 200 HTML with the headers for an
    operator, and the JSON twin names the registration."""
    with wsgi_client(threaded, is_operator) as client:
        path = "/api/talaria/relay/operator"
        assert client.get(path).status_code == 401
        assert client.get(path, headers=MEMBER).status_code == 403
        html = client.get(path, headers=OPERATOR)
        assert html.status_code == 200
        assert html.headers["content-type"] == "text/html; charset=utf-8"
        secured(html)
        assert "https://wsgi.example" in html.text
        data = client.get(path + ".json", headers=OPERATOR).json()
        assert data["registration"]["publisher_id"] == "https://wsgi.example"
        secured(client.get(path + ".json"))


async def test_this_replicas_passes_feed_the_strip(store: RelayStore) -> None:
    """Two good passes and a 503 are three ring entries (the last with its backoff's end); the
    strip draws a tick for each, a band for the backoff, and counts them in its title."""
    async with relay_env(store) as env:
        await paired(env)
        env.clock.advance(60)
        assert await env.publish() is None
        env.relay.inject("snapshot", 503)
        env.clock.advance(60)
        assert await env.publish() == 5.0
        document = await gathered(env)
        (replica,) = document["fleet"]["replicas"]
        ring = replica["ring"]
        assert [one["outcome"] for one in ring] == ["ok", "ok", "failed"]
        assert ring[-1]["backoff_until"] == ring[-1]["at"] + 5000
        svg = strips.strip(ring, document["generated_at"])
        assert svg.count('class="ok"') == 2
        assert svg.count('class="failed"') == 1
        assert svg.count('class="backoff"') == 1
        assert "2 passes ok, 1 failed" in svg
        old = [{"at": document["generated_at"] - 2 * strips.STRIP_S * 1000, "outcome": "ok"}]
        assert 'class="ok"' not in strips.strip(old, document["generated_at"])


async def test_the_backlog_is_shown_per_profile_with_its_oldest_age(store: RelayStore) -> None:
    """An announcement not yet sent and a deletion not yet acknowledged show on their profile,
    each with the age of the oldest; the page lists them."""
    async with relay_env(store) as env:
        await paired(env)
        now_ms = int(env.clock() * 1000)
        scope = await env.profile_id()
        await store.record_started_scopes({scope: [("later", now_ms + 1)]}, now_ms + 1)
        await store.enqueue_deleted(
            "gone", "default", now_ms, session_live=False, identity=None, scope=None
        )
        env.clock.advance(90)
        document = await gathered(env)
        (profile,) = document["profiles"]
        assert profile["announcements_unsent"] == 1
        assert profile["announcements_oldest_age_s"] == 90.0
        assert profile["outbox_depth"] == 1
        assert profile["outbox_oldest_age_s"] == 90.0
        assert "oldest 90 s" in page.render(document)


@on("postgres")
async def test_a_store_password_is_never_shown(store_url: str) -> None:
    """A store URL with a password: the page and its JSON name the store without it."""
    url = store_url.replace("postgres@", "postgres:hunter2-secret@", 1)
    assert "hunter2-secret" in url
    async with open_store(url) as store, relay_env(store) as env, web(env) as client:
        await paired(env)
        html = await client.get("/api/talaria/relay/operator", headers=OPERATOR)
        data = await client.get("/api/talaria/relay/operator.json", headers=OPERATOR)
        assert "127.0.0.1" in data.json()["store"]["url"]
        for text in (html.text, data.text):
            assert "hunter2" not in text


async def test_the_fleet_record_names_each_replica_and_the_recently_gone(
    store: RelayStore,
) -> None:
    """Replicas from the fleet record: one live and backing off (its release, host, failure
    class), one gone 10 min ago (listed, `gone`), one gone 2 h ago (only counted)."""
    async with relay_env(store) as env:
        await paired(env)
        now = int(env.clock() * 1000)

        def member(owner: str, seen: int, **more: Any) -> FleetMember:
            return FleetMember(
                owner, "9.9.9", "0008", "host-b", 42, now - 600_000, seen, seen + 20_000, **more
            )

        await store.record_member(
            member(
                "web-2/aaaaaaaaaaaa",
                now,
                pass_at=now - 1_000,
                pass_outcome="backoff",  # noqa: S106 - an outcome, not a password
                backoff_until=now + 30_000,
                backoff_class="RelayUnreachableError",
                clock_offset_ms=-4250,
                passes="oo.fb",
            )
        )
        await store.record_member(member("web-3/bbbbbbbbbbbb", now - 600_000))
        await store.record_member(member("web-4/cccccccccccc", now - 7_200_000))
        document = await gathered(env)
        fleet = document["fleet"]
        assert fleet["source"] == "fleet"
        assert fleet["gone_earlier"] == 1
        rows = {row["owner"]: row for row in fleet["replicas"]}
        assert "web-4/cccccccccccc" not in rows
        backing = rows["web-2/aaaaaaaaaaaa"]
        assert (backing["release"], backing["host"], backing["alive"]) == ("9.9.9", "host-b", True)
        assert backing["backoff_failure"] == "RelayUnreachableError"
        # Another replica's offset and passes come from its own fleet row.
        assert backing["clock_offset_s"] == -4.25
        # Its ring ends at its last pass's minute; the minutes since then are empty.
        since = now // 60_000 - (now - 1_000) // 60_000
        assert backing["passes"] == "." * (55 - since) + "oo.fb" + "." * since
        assert rows["web-3/bbbbbbbbbbbb"]["passes"] is None
        assert rows["web-3/bbbbbbbbbbbb"]["alive"] is False
        assert rows[env.service.owner]["this_replica"] is True
        html = page.render(document)
        assert "The relay could not be reached" in html
        assert "1 gone more than an hour ago" in html
        assert "clock 4.2 s behind the store" in html
        assert "2 minutes ok, 1 with a failure" in html
        assert "on its own page" not in html
        assert html.count('class="pill off">gone<') == 1
        level, line, reasons = page.verdict(document)
        assert level == "warn"
        assert "2 replicas live (1 backing off)" in line
        assert any("web-2/aaaaaaaaaaaa's clock is 4.2 s behind" in why for why in reasons)


async def test_a_replica_clock_far_from_the_stores_is_named(store: RelayStore) -> None:
    """This replica's clock offset shows under its name; past 1 s the verdict asks for NTP."""
    async with relay_env(store) as env:
        await paired(env)
        document = await gathered(env)
        (replica,) = document["fleet"]["replicas"]
        assert "clock_offset_s" in replica  # None on a store without a clock of its own
        replica["clock_offset_s"] = 0.2
        assert "clock 0.2 s ahead of the store" in page.render(document)
        assert judge(document)[0] == "ok"
        replica["clock_offset_s"] = -4.25
        level, _, reasons = judge(document)
        assert level == "warn"
        assert reasons == [
            f"replica {replica['owner']}'s clock is 4.2 s behind the store: check its time sync "
            "(NTP)"
        ]


async def test_another_replicas_page_shows_this_ones_backoff_while_it_lasts(
    store: RelayStore,
) -> None:
    """A failed pass writes its backoff to this replica's fleet row at once: what another
    replica gathers (no `Own`: the store alone) shows it backing off until the backoff's end,
    with the failure's class and status, and names it among the problems; after a good pass
    it no longer does."""
    async with relay_env(store) as env:
        await paired(env)
        env.relay.inject("snapshot", 503)
        assert await env.publish() == 5.0
        now_ms = int(env.clock() * 1000)
        seen = await facts.gather(store, now_ms)
        (row,) = seen["fleet"]["replicas"]
        assert row["owner"] == env.service.owner
        assert row["this_replica"] is False
        assert row["backoff_until"] == now_ms + 5000
        assert (row["backoff_failure"], row["backoff_status"]) == ("RelayHttpError", 503)
        assert seen["problems"] == [
            f"replica {row['owner']} is backing off: the relay answered HTTP 503 "
            "(RelayHttpError); it retries in 5 s"
        ]
        assert seen["level"] == "bad"
        env.clock.advance(6)
        assert await env.publish() is None
        later = await facts.gather(store, int(env.clock() * 1000))
        assert later["problems"] == []
        assert later["level"] == "ok"


async def test_the_json_problems_are_the_headlines_list(store: RelayStore) -> None:
    """The JSON twin's level, headline and problems are what the HTML's headline shows: one
    judgement for both (a backing-off replica and a disabled profile here)."""
    async with relay_env(store) as env, web(env) as client:
        await paired(env)
        env.relay.inject("snapshot", 503)
        assert await env.publish() == 5.0
        page_path = "/api/talaria/relay/operator"
        document = (await client.get(page_path + ".json", headers=OPERATOR)).json()
        text = (await client.get(page_path, headers=OPERATOR)).text
        verdict = text.split('<div class="verdict ', 1)[1].split("</div>", 1)[0]
        listed = [html.unescape(item.split("</li>")[0]) for item in verdict.split("<li>")[1:]]
        assert document["problems"] == listed
        assert len(listed) == 1
        assert "backing off" in listed[0]
        assert verdict.startswith(f'{document["level"]}" role="status">')
        assert html.escape(document["headline"]) in verdict


async def test_a_name_longer_than_64_characters_is_cut_with_the_whole_one_click_away(
    store: RelayStore,
) -> None:
    """A 4,096-character profile name shows its first 64 characters and its length; the whole
    name is inside a `<details>`, escaped like every value."""
    async with relay_env(store) as env:
        await paired(env)
        document = await gathered(env)
        name = "<" * 4096
        document["profiles"][0]["name"] = name
        shown = page.render(document)
        assert shown.count('<details class="long">') == 1
        assert f"<summary>{'&lt;' * 64}… " in shown
        assert "(4,096 characters)" in shown
        assert "&lt;" * 4096 in shown
        assert "<<" not in shown


@pytest.mark.parametrize("method", ["POST", "HEAD", "PUT"])
async def test_any_method_but_get_is_405_with_the_headers_on_both_faces(
    store: RelayStore, threaded: ThreadedRelayService, method: str
) -> None:
    """ASGI and WSGI answer any method but GET on the operator routes 405, `Allow: GET`, with
    the strict headers and a JSON body (none for HEAD); the other routes' 405 is JSON too."""
    paths = ["/api/talaria/relay/operator", "/api/talaria/relay/operator.json"]
    async with relay_env(store) as env, web(env) as client:
        for path in paths:
            response = await client.request(method, path, headers=OPERATOR)
            assert (response.status_code, response.headers["allow"]) == (405, "GET")
            secured(response)
            assert response.content == (
                b"" if method == "HEAD" else b'{"error": "Method not allowed"}'
            )
        health = await client.request("PUT", "/api/talaria/relay/health")
        assert (health.status_code, health.json()) == (405, {"error": "Method not allowed"})
    with wsgi_client(threaded, is_operator) as sync:
        for path in paths:
            response = sync.request(method, path, headers=OPERATOR)
            assert (response.status_code, response.headers["allow"]) == (405, "GET")
            secured(response)
            assert response.headers["content-type"] == "application/json"
