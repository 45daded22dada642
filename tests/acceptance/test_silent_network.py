"""A replica silently cut off from Postgres (issue 33), on real processes and a real server.

Three replicas share one Postgres; one reaches it through an in-process blackhole proxy
(`tests/blackhole.py`) that stops forwarding both ways without closing anything, for less and for
more than a lease, once while a pass runs and once while a snapshot is on its way to the relay.
Each test prints its timings: how long `health()` took on the cut replica (at most), how long
after the cut the replica said its store was silent, how long after the heal the relay showed the
turns' true phases, and whether every final row is right.

    pytest tests/acceptance/test_silent_network.py -s            # the CI cases (lease 4 s)
    pytest tests/acceptance/test_silent_network.py -s -m soak    # lease 20 s, cuts of 45 s, 10 s
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import pytest
from backends import on
from blackhole import Blackhole
from replicas import Cluster, Replica, cluster, spawn, until
from sqlalchemy import make_url

pytestmark = on("postgres")

START = 1_800_000_000.0
# The sessions, and where each turn runs: the cut replica hosts three.
LIVE, ENDS_IN_CUT, SUPERSEDED, ELSEWHERE = "live", "ends-in-cut", "superseded", "elsewhere"


@dataclass
class Figures:
    """What one cut measured; None: never within the test's wait."""

    lease_s: float
    cut_s: float
    during: str
    health_latency_s: float = 0.0
    noticed_s: float | None = None
    true_after_heal_s: float | None = None
    rows: dict[str, tuple[str | None, str] | None] = field(default_factory=dict)
    stale: int = 0
    # The phases the relay's row of LIVE went through.
    live_phases: list[str] = field(default_factory=list)

    def line(self) -> str:
        def shown(value: float | None) -> str:
            return "never" if value is None else f"{value:.2f}s"

        return (
            f"silent network, lease {self.lease_s:g}s, cut {self.cut_s:g}s during a "
            f"{self.during}: health latency {self.health_latency_s:.2f}s (max), noticed "
            f"{shown(self.noticed_s)} after the cut, true phase {shown(self.true_after_heal_s)} "
            f"after the heal, final rows {self.rows}, {self.stale} stale, {LIVE}: "
            f"{' > '.join(self.live_phases)}"
        )


def proxied(store_url: str, port: int) -> str:
    """`store_url` through the blackhole on `port` (loopback)."""
    url = make_url(store_url).set(host="127.0.0.1", port=port)
    return url.render_as_string(hide_password=False)


async def watch_health(replica: Replica, figures: Figures, stop: asyncio.Event) -> None:
    """Ask the cut replica's health every 0.2 s; keep the slowest answer, and when it first
    said the store was silent (or not reachable)."""
    began = time.monotonic()
    while not stop.is_set():
        health = await replica.call("health")
        figures.health_latency_s = max(figures.health_latency_s, health["latency_s"])
        if not health["store_reachable"] and figures.noticed_s is None:
            figures.noticed_s = time.monotonic() - began
        await asyncio.sleep(0.2)


async def noticed_in_logs(replica: Replica, began: float, stop: asyncio.Event) -> float | None:
    """When the cut replica first logged a WARNING about its store, after `began`."""
    while not stop.is_set():
        lines = await replica.call("logs")
        if any(line.startswith("WARNING") and "store" in line for line in lines):
            return time.monotonic() - began
        await asyncio.sleep(0.1)
    return None


async def true_phases(group: Cluster, expected: dict[str, tuple[str, str]], within: float) -> bool:
    """Whether the relay's rows reach `expected` within `within` seconds."""
    ends = time.monotonic() + within
    while time.monotonic() < ends:
        if all(group.row(sid) == row for sid, row in expected.items()):
            return True
        await asyncio.sleep(0.05)
    return False


async def cut_off(store_url: str, lease_s: float, cut_s: float, during: str) -> Figures:
    """The scene: run it, measure it, return the figures (asserted by the caller)."""
    figures = Figures(lease_s, cut_s, during)
    url = make_url(store_url)
    async with (
        Blackhole(url.host or "127.0.0.1", url.port or 5432) as hole,
        cluster(store_url, 2, lease_s=lease_s) as group,
    ):
        cut = await spawn(proxied(store_url, hole.port), group.relay_url, "cut", lease_s=lease_s)
        group.replicas.append(cut)  # stopped with the others
        steady, newer = group.replicas[0], group.replicas[1]
        await group.pair(steady)
        for sid in (LIVE, ENDS_IN_CUT, SUPERSEDED, ELSEWHERE):
            await group.everywhere("session", id=sid, created_at=START)
        for n, sid in enumerate((LIVE, ENDS_IN_CUT, SUPERSEDED)):
            await cut.call("start", session=sid, stream=f"{sid}-1", at=START + n)
        await steady.call("start", session=ELSEWHERE, stream=f"{ELSEWHERE}-1", at=START)
        await group.everywhere("flush")
        running = {sid: (f"{sid}-1", "running") for sid in (LIVE, ENDS_IN_CUT, SUPERSEDED)}
        assert all(group.row(sid) == row for sid, row in running.items())

        if during == "snapshot send":
            # The cut falls while the cut replica's snapshot is at the relay: its sending marks
            # are still set, and their release waits on the silent store.
            sent = len(group.relay.requests)
            group.relay.slow("snapshot", 1.0)
            await cut.call("changed")
            await until(lambda: any(r.route == "snapshot" for r in group.relay.requests[sent:]), 10)
            hole.cut()
        else:
            # The cut falls while a pass runs: the one this turn's end wakes.
            await cut.call("end", stream=f"{ENDS_IN_CUT}-1", phase="completed")
            hole.cut()
        cut_at = time.monotonic()
        stop = asyncio.Event()
        watching = asyncio.create_task(watch_health(cut, figures, stop))
        logged = asyncio.create_task(noticed_in_logs(cut, cut_at, stop))
        if during == "snapshot send":
            await cut.call("end", stream=f"{ENDS_IN_CUT}-1", phase="completed")
        # Meanwhile elsewhere: a newer turn of a session the cut replica hosts, a turn's end.
        await newer.call("start", session=SUPERSEDED, stream=f"{SUPERSEDED}-2", at=START + 9)
        await steady.call("end", stream=f"{ELSEWHERE}-1", phase="completed")
        await newer.call("flush")
        await steady.call("flush")
        await asyncio.sleep(max(cut_s - (time.monotonic() - cut_at), 0.0))
        hole.heal()
        healed_at = time.monotonic()
        stop.set()
        await watching
        in_logs = await logged
        if in_logs is not None:
            figures.noticed_s = min(in_logs, figures.noticed_s or in_logs)

        # The cut replica still runs LIVE and ran ENDS_IN_CUT to its end: the relay must say so.
        expected = {
            LIVE: (f"{LIVE}-1", "running"),
            ENDS_IN_CUT: (f"{ENDS_IN_CUT}-1", "completed"),
        }
        if await true_phases(group, expected, within=3 * lease_s + 5):
            figures.true_after_heal_s = time.monotonic() - healed_at
        # Then LIVE ends on the cut replica, and every replica publishes once more.
        await cut.call("end", stream=f"{LIVE}-1", phase="completed")
        await group.everywhere("flush")
        await group.everywhere("flush")
        figures.rows = {sid: group.row(sid) for sid in (LIVE, ENDS_IN_CUT, SUPERSEDED, ELSEWHERE)}
        figures.stale = group.stale()
        figures.live_phases = [phase for _, phase in group.history(LIVE)]
        for sid in (LIVE, ENDS_IN_CUT, SUPERSEDED, ELSEWHERE):
            streams = [stream or "" for stream, _ in group.history(sid)]
            assert streams == sorted(streams), f"{sid} went back to an older turn"
    return figures


SOAK = pytest.mark.soak
FINAL = {
    LIVE: (f"{LIVE}-1", "completed"),
    ENDS_IN_CUT: (f"{ENDS_IN_CUT}-1", "completed"),
    SUPERSEDED: (f"{SUPERSEDED}-2", "running"),
    ELSEWHERE: (f"{ELSEWHERE}-1", "completed"),
}


@pytest.mark.parametrize(
    ("lease_s", "cut_s", "during"),
    [
        pytest.param(4.0, 2.0, "pass", id="lease-4s-cut-2s-pass"),
        pytest.param(4.0, 10.0, "snapshot send", id="lease-4s-cut-10s-send"),
        pytest.param(20.0, 45.0, "pass", id="lease-20s-cut-45s-pass", marks=SOAK),
        pytest.param(20.0, 10.0, "snapshot send", id="lease-20s-cut-10s-send", marks=SOAK),
    ],
)
async def test_a_silent_store_network_is_answered_noticed_and_healed(
    store_url: str, lease_s: float, cut_s: float, during: str
) -> None:
    """One replica's packets to Postgres are dropped for `cut_s`: its `health()` answers within
    a second all along, it says its store is silent within half a lease, and after the heal the
    relay shows each turn's true phase (a takeover's `failed` corrected once), never an older
    turn over a newer one, nothing stale."""
    figures = await cut_off(store_url, lease_s, cut_s, during)
    print(figures.line())
    assert (figures.rows, figures.stale) == (FINAL, 0)
    # Past the lease another replica published the live turn failed; the truth corrected it once.
    corrected = ["running", "failed", "running", "completed"]
    assert figures.live_phases == (corrected if cut_s > lease_s else ["running", "completed"])
    assert figures.health_latency_s < 1.0
    assert figures.noticed_s is not None
    assert figures.noticed_s <= lease_s / 2 + 0.5
    assert figures.true_after_heal_s is not None
    assert figures.true_after_heal_s <= lease_s + 1.0
