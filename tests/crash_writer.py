"""The crash tests' writer: every kind of store write, cycle after cycle, until it is killed.

    python tests/crash_writer.py STORE_URL ROUND

Each write is announced on stdout before its method is called (`{"n": 7, "op": ..., "args": ...}`)
and acknowledged once the method returned (`{"n": 7, "ok": ...}`), each line in one write(2) of its
own, before the next write starts. So whoever kills this process knows which writes were
acknowledged and which one, at most, was under way. Values are deterministic in (round, cycle),
and the clock is virtual: round r runs at `BASE + r * ROUND_MS`, one second a cycle.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from dataclasses import asdict
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from relay.store import (
    DeletedScope,
    DeletedView,
    ProfileGrant,
    RelayConfig,
    RelayStore,
    RunState,
    StartedEntry,
    open_store,
)
from relay.store.records import PassRows

BASE = 1_800_000_000_000
# Four hours a round: the 24 h ledger window, the 15 min presence fence and run retention all turn
# over within a few rounds, so the state stays small however many rounds there are.
ROUND_MS = 4 * 3600 * 1000
STEP_MS = 1000
LEASE_MS = 20_000
PRESENCE = {"lease_ms": 90_000, "fence_ms": 900_000, "max_tabs": 4}
RETENTION_MS = 900_000
MAX_CYCLES = 1000  # far more than a writer lives; then it idles until it is killed

RELAY = "https://relay.example"
PUBLISHER = "https://hermes.example"
KEY_IDS = ("key-0", "key-1")
PROFILES = ("profile-0", "profile-1", "profile-2")
SCOPES = ("prf_a", "prf_b")
PHASES = ("starting", "running", "waiting_for_input", "completed", "running", "failed")


def pem(seed: str) -> str:
    """A deterministic Ed25519 PKCS#8 PEM."""
    key = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed.encode()).digest())
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


def clock(round_: int, cycle: int) -> int:
    return BASE + round_ * ROUND_MS + cycle * STEP_MS


# ── the log's encoding of arguments and answers ──────────────────────────────


def registration(key_id: str, key_ref: str, tag: str) -> dict[str, Any]:
    """A registration naming the key, as the log holds it; `tag` tells it from the others."""
    grants = {p: [f"grant-{tag}", SCOPES[i % 2]] for i, p in enumerate(PROFILES)}
    return {
        "url": RELAY,
        "publisher_id": PUBLISHER,
        "key_id": key_id,
        "key_ref": key_ref,
        "profiles": grants,
    }


def config_of(data: dict[str, Any]) -> RelayConfig:
    grants = {name: ProfileGrant(*grant) for name, grant in data["profiles"].items()}
    return RelayConfig(data["url"], data["publisher_id"], data["key_id"], data["key_ref"], grants)


def scope_of(data: dict[str, str] | None) -> DeletedScope | None:
    return None if data is None else DeletedScope(**data)


def invocation(op: str, args: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The store call that the logged `op` with `args` stands for: positional, keyword arguments."""
    kw = dict(args)
    if op == "save_config":
        kw["config"] = config_of(kw["config"])
    elif op == "record_started_scopes":
        kw["seen"] = {scope: [(sid, at) for sid, at in seen] for scope, seen in kw["seen"].items()}
    elif op == "claim_started_scopes":
        kw["sent"] = [(scope, sid) for scope, sid in kw.get("sent", ())]
    elif op in ("enqueue_deleted", "bind_deleted"):
        kw["scope"] = scope_of(kw["scope"])
    elif op == "pass_write":
        kw["live"] = [RunState(**run) for run in kw["live"]]
    return (), kw


def view_data(view: DeletedView) -> dict[str, Any]:
    return asdict(view)


def encoded(result: object) -> Any:
    """A method's answer as the log holds it."""
    if isinstance(result, list):
        return [encoded(item) for item in result]
    if isinstance(result, StartedEntry):
        return result.session_id
    if isinstance(result, DeletedView | RunState):
        return asdict(result)
    if isinstance(result, PassRows):
        return {"runs": encoded(list(result.runs)), "revisions": list(result.revisions)}
    return result


def emit(line: dict[str, Any]) -> None:
    # One write(2) a line (a pipe takes up to 4 KiB whole): a kill can tear only the last line.
    data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


# ── the writer ────────────────────────────────────────────────────────────────


class Writer:
    def __init__(self, store: RelayStore, round_: int, config: RelayConfig | None) -> None:
        self.store = store
        self.round = round_
        self.owner = f"w{round_}"
        self.n = 0
        self.key_id = config.key_id if config else KEY_IDS[0]
        self.key_ref = config.key_ref if config else None
        self.hosted: dict[str, RunState] = {}

    async def call(self, op: str, **args: Any) -> Any:
        """Announce, call and acknowledge one store method."""
        n, self.n = self.n, self.n + 1
        emit({"n": n, "op": op, "args": args})
        positional, keywords = invocation(op, args)
        result = await getattr(self.store, op)(*positional, **keywords)
        emit({"n": n, "ok": encoded(result)})
        return result

    async def cycle(self, c: int) -> None:
        r, now = self.round, clock(self.round, c)
        await self.registration(c)
        profile = PROFILES[c % 3]
        identity = await self.call("profile_identity", profile=profile)
        if c % 5 == 4:
            await self.call("forget_profile_identity", profile=PROFILES[(c + 1) % 3])
        # Half the time the clock is behind the floor, so the floor decides.
        await self.call("allocate_revisions", count=1 + c % 3, now_ms=now if c % 2 else 1)
        await self.ledger(c, now)
        await self.outbox(c, now, profile, identity)
        tab = f"tab-{c % 5}"
        await self.call(
            "apply_presence", profile=profile, tab_id=tab, seq=r * 100_000 + c,
            active=c % 2 == 0, now_ms=now, **PRESENCE,
        )  # fmt: skip
        if c % 6 == 5:  # a replayed heartbeat: the fence refuses it
            await self.call(
                "apply_presence", profile=profile, tab_id=tab, seq=r * 100_000 + c - 5,
                active=True, now_ms=now, **PRESENCE,
            )  # fmt: skip
        await self.runs(c, now, profile)

    async def registration(self, c: int) -> None:
        """A new key under the other key id, a registration naming it, the old key deleted."""
        old_ref = self.key_ref
        self.key_id = KEY_IDS[1 - KEY_IDS.index(self.key_id)]
        self.key_ref = await self.call("save_key", key_id=self.key_id, pem=pem(f"{self.round}/{c}"))
        config = registration(self.key_id, self.key_ref, f"r{self.round}-c{c}")
        await self.call("save_config", config=config)
        if old_ref is not None:
            await self.call("delete_key", ref=old_ref)
        if c % 4 == 0:  # the key the registration names: refused, nothing changes
            await self.call("delete_key", ref=self.key_ref)

    async def ledger(self, c: int, now: int) -> None:
        r = self.round
        if c % 8 == 0:
            await self.call("track_started", profile_ids=[SCOPES[0], f"prf_r{r % 3}"], now_ms=now)
        scope = SCOPES[c % 2]
        # The previous cycle's session again: seen twice, recorded once.
        seen = [[f"s-r{r}-c{c}", now - 1000], [f"s-r{r}-c{c - 2}", now - 3000]]
        await self.call("record_started_scopes", seen={scope: seen}, now_ms=now)
        claimed = await self.call(
            "claim_started_scopes", profile_ids=[scope], owner=self.owner, now_ms=now,
            lease_ms=LEASE_MS, limit=2,
        )  # fmt: skip
        if claimed:  # the first announced (the marks alone); the second stays claimed
            await self.call(
                "claim_started_scopes", profile_ids=[], owner=self.owner, now_ms=now,
                lease_ms=LEASE_MS, sent=[[scope, claimed[0].session_id]],
            )  # fmt: skip

    async def outbox(self, c: int, now: int, profile: str, identity: str) -> None:
        r = self.round
        await self.call(
            "enqueue_deleted", session_id=f"d-r{r}-c{c}", profile=profile, now_ms=now,
            session_live=c % 2 == 0, identity=identity if c % 3 == 0 else None, scope=None,
        )  # fmt: skip
        if c % 4 == 1:  # queued again while its session still has data: `through` moves on
            await self.call(
                "enqueue_deleted", session_id=f"d-r{r}-c{c - 1}", profile=PROFILES[(c - 1) % 3],
                now_ms=now, session_live=True, identity=None, scope=None,
            )  # fmt: skip
        if c % 3 == 2:
            scope = {"url": RELAY, "publisher_id": PUBLISHER, "profile_id": SCOPES[c % 2]}
            await self.call("bind_deleted", profile=profile, identity=identity, scope=scope)
        views = await self.call(
            "claim_deleted", owner=self.owner, now_ms=now, lease_ms=LEASE_MS, limit=3
        )
        if views:  # the first delivered; the others stay claimed
            await self.call("ack_deleted", view_id=views[0].id, through=views[0].through)

    async def runs(self, c: int, now: int, profile: str) -> None:
        r, turn = self.round, c - c % 2  # a turn lasts two cycles
        run = RunState(
            f"run-{c % 4}", f"st-r{r}-c{turn}", profile, f"turn {turn}", PHASES[c % len(PHASES)],
            started_at=clock(r, turn), updated_at=now, owner=self.owner,
        )  # fmt: skip
        # A pass offers every turn this writer hosts; a turn that ended is offered once.
        self.hosted[run.session_id] = run
        live = [asdict(self.hosted[sid]) for sid in sorted(self.hosted)]
        await self.call(
            "pass_write", owner=self.owner, live=live, now_ms=now, lease_ms=LEASE_MS,
            retention_ms=RETENTION_MS,
        )  # fmt: skip
        if run.terminal:
            self.hosted.pop(run.session_id, None)
        if c % 3 == 1:
            await self.call("release_runs", owner=self.owner)
        if c % 2 == 0:
            await self.call("keep_alive", owner=self.owner, now_ms=now, lease_ms=LEASE_MS)


async def main(url: str, round_: int) -> None:
    async with open_store(url) as store:
        writer = Writer(store, round_, await store.load_config())
        emit({"ready": True})
        for cycle in range(MAX_CYCLES):
            await writer.cycle(cycle)
        emit({"done": True})
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
