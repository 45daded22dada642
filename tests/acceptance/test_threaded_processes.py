"""Threaded servers as real processes on one Postgres: two of them behave as two async replicas
do, and gunicorn (two workers, with and without `--preload`) serving the Flask example publishes
from both workers without duplicates."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import forked
import httpx
import pytest
from backends import on
from replicas import REPLY_TIMEOUT_S, Cluster, Replica
from threaded_support import ROOT, RelayThread, relay_thread, until

from examples.hermes import Sessions
from relay.store import RunState, open_store
from relay.testing import DevRelay, serve
from relay.threaded import ThreadedRelayService

pytestmark = on("postgres")

PROC = ROOT / "tests" / "threaded_proc.py"
START = 1_800_000_000.0


OWNER = {"authorization": "Bearer owner-token", "connection": "close"}


async def spawn(store_url: str, relay_url: str, name: str, heartbeat_s: float) -> Replica:
    process = await forked.start(
        PROC, store_url, relay_url, "20", str(heartbeat_s), capture_stderr=False
    )
    ready = await asyncio.wait_for(process.stdout.readline(), REPLY_TIMEOUT_S)
    assert b'"ok": true' in ready, ready
    return Replica(name, process)


@asynccontextmanager
async def threaded_pair(store_url: str, heartbeat_s: float = 60.0) -> AsyncIterator[Cluster]:
    """Two threaded servers of one store publishing to one dev relay on loopback."""
    relay = DevRelay()
    async with serve(relay) as relay_url:
        replicas: list[Replica] = []
        try:
            for n in range(2):
                replicas.append(await spawn(store_url, relay_url, f"threaded-{n}", heartbeat_s))
            yield Cluster(relay, relay_url, store_url, replicas)
        finally:
            await asyncio.gather(*(r.stop() for r in replicas))


async def test_two_threaded_servers_keep_one_truth_per_session(store_url: str) -> None:
    """Turns of two sessions hand off between two threaded servers every step while both
    publish in the background: each row is always the newest turn, and no revision is stale."""
    async with threaded_pair(store_url, heartbeat_s=1.0) as group:
        await group.pair()
        sessions = ("alpha", "beta")
        for sid in sessions:
            await group.everywhere("session", id=sid, created_at=START)
        turns = 8
        for turn in range(turns):
            for offset, sid in enumerate(sessions):
                host = group.replicas[(turn + offset) % 2]
                stream = f"{sid}-{turn:02d}"
                await host.call("start", session=sid, stream=stream)
                await group.everywhere("flush")
                assert [r["streamId"] for r in group.rows_of(sid)] == [stream]
                await host.call("end", stream=stream, phase="completed")
                await group.everywhere("flush")
                assert [(r["streamId"], r["phase"]) for r in group.rows_of(sid)] == [
                    (stream, "completed")
                ]
        await asyncio.sleep(1.5)  # background heartbeats of both
        await group.everywhere("flush")
        assert group.stale() == 0
        for sid in sessions:
            streams = [stream or "" for stream, _ in group.history(sid)]
            assert streams == sorted(streams), f"{sid} went back to an older turn"
            assert len(group.history(sid)) == 2 * turns


async def test_two_threaded_servers_announce_and_delete_once(store_url: str) -> None:
    """Sessions both servers know are announced once; deletions queued on both are
    acknowledged once each."""
    async with threaded_pair(store_url) as group:
        await group.pair()
        for n in range(4):
            await group.everywhere("session", id=f"d{n}", created_at=time.time())
            host = group.replicas[n % 2]
            await host.call("start", session=f"d{n}", stream=f"t{n}")
            await host.call("end", stream=f"t{n}", phase="completed")
        for _ in range(2):
            await group.everywhere("flush")
        assert sorted(e.session_id for e in group.relay.started_events) == ["d0", "d1", "d2", "d3"]
        for n in range(4):
            await group.everywhere("forget", id=f"d{n}")
            await group.everywhere("delete", session=f"d{n}", profile="default")
        for _ in range(3):
            await group.everywhere("flush")
        assert sorted(ack.session_id for ack in group.relay.viewed) == ["d0", "d1", "d2", "d3"]
        owners = await group.everywhere("owner")
        assert len(set(owners)) == 2


# ── gunicorn ──────────────────────────────────────────────────────────────────


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def gunicorn(store_url: str, relay_url: str, worker: str, preload: bool) -> Iterator[str]:
    """The Flask example under gunicorn, two workers; its base URL."""
    port = free_port()
    command = [
        sys.executable, "-m", "gunicorn", "--workers", "2", "--worker-class", worker,
        "--threads", "4", "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "10",
        *(["--preload"] if preload else []), "examples.flask_app:from_env()",
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TALARIA_RELAY_STORE_URL": store_url,
        "TALARIA_RELAY_URL": relay_url,
        "EXAMPLE_LOOPBACK_RELAY": "1",
    }
    master = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        until(lambda: _healthy(base), within=60, step=0.2)
        yield base
    finally:
        master.send_signal(signal.SIGTERM)
        try:
            _, log = master.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            master.kill()
            _, log = master.communicate()
    assert master.returncode == 0, log
    assert "Traceback" not in log, log


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/api/talaria/relay/health").status_code == 200
    except httpx.TransportError:
        return False


def post_until_ok(base: str, path: str, body: dict[str, str]) -> int:
    """POST on fresh connections until the worker holding the session answers; its pid."""
    for _ in range(200):
        answer = httpx.post(f"{base}{path}", json=body, headers=OWNER)
        if answer.status_code == 200:
            return int(answer.json()["worker"])
        assert answer.status_code == 404, answer.text
    raise AssertionError(f"no worker answered {path}")


def run_states(url: str) -> list[RunState]:
    async def read() -> list[RunState]:
        async with open_store(url) as store:
            return await store.run_states()

    return asyncio.run(read())


def pair_first(store_url: str, dev: RelayThread) -> None:
    """Register the server before the deploy, as an operator would."""
    with ThreadedRelayService(
        store_url, Sessions(), relay_url=dev.url, allow_insecure_loopback=True
    ) as relay:
        relay.pair(dev.pairing(), "default", operator=True)


@pytest.mark.parametrize(
    ("worker", "preload"), [("sync", False), ("gthread", True)], ids=["sync", "gthread-preload"]
)
def test_gunicorn_workers_publish_without_duplicates(
    store_url: str, worker: str, preload: bool
) -> None:
    """Sessions created on either worker are announced once; their turns, hosted by both
    workers (two owners), reach the relay completed; deletions are acknowledged once."""
    with relay_thread() as dev:
        pair_first(store_url, dev)
        with gunicorn(store_url, dev.url, worker, preload) as base:
            workers: dict[int, list[str]] = {}
            for n in range(200):
                sid = f"s{n:03d}"
                answer = httpx.post(
                    f"{base}/api/sessions", json={"id": sid, "title": "Chat"}, headers=OWNER
                )
                workers.setdefault(answer.json()["worker"], []).append(sid)
                if len(workers) == 2 and min(map(len, workers.values())) >= 2:
                    break
            assert len(workers) == 2, "one worker answered every request"
            sessions = [sid for sids in workers.values() for sid in sids]
            for sid in sessions:
                post_until_ok(base, f"/api/sessions/{sid}/turn", {"stream_id": f"{sid}-t"})
            for sid in sessions:
                end = {"stream_id": f"{sid}-t", "phase": "completed"}
                post_until_ok(base, f"/api/sessions/{sid}/turn/end", end)
            done = {sid: (f"{sid}-t", "completed") for sid in sessions}
            until(
                lambda: {r["sessionId"]: (r["streamId"], r["phase"]) for r in dev.rows()} == done,
                within=60,
            )
            hosts = {run.owner for run in run_states(store_url) if run.session_id in done}
            assert len(hosts) == 2, hosts
            doomed = [sids[0] for sids in workers.values()]
            for sid in doomed:
                for _ in range(200):
                    answer = httpx.delete(f"{base}/api/sessions/{sid}", headers=OWNER)
                    if answer.status_code == 200:
                        break
            until(lambda: sorted(dev.viewed()) == sorted(doomed), within=60)
            announced = Counter(dev.started())
            assert set(announced) == set(sessions)
            assert set(announced.values()) == {1}, announced
            assert dev.stale() == 0
        time.sleep(1.0)
        assert sorted(dev.viewed()) == sorted(doomed)
