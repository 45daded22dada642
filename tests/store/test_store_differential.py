"""Differential: the same random run of calls on `memory://` and on a real backend answers alike.

The state machine (`test_store_machine.py`) holds each backend to a model; this holds the two
forms of every rule, the plain-Python rulebook (memory) and SQL or the JSON files, to each other
directly, run states included, so a gap in the model cannot hide a difference between them.
Deletion ids are each store's own, so views are compared by what they say, not by their id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any, TypeVar

from backends import REAL, on
from databases import FreshStores
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from relay.store import DeletedView, RelayStore, RunState, open_store

pytestmark = on(*REAL)

T = TypeVar("T")
START = 1_800_000_000_000
SECOND = 1000
SESSIONS = ("s1", "s2", "s3")
SCOPES = ("prf_a", "prf_b")
OWNERS = ("web-1/0a0a0a0a0a0a", "web-1/1b1b1b1b1b1b", "web-2/2c2c2c2c2c2c")
TABS = ("tab-aaaaaaaa", "tab-bbbbbbbb")
ticks = st.sampled_from([0, 1, 999, 20 * SECOND, 16 * 60 * SECOND, 25 * 3600 * SECOND])
leases = st.sampled_from([SECOND, 20 * SECOND])
phases = st.sampled_from(["running", "completed", "failed"])
RETENTION = 15 * 60 * SECOND


def _views(views: list[DeletedView]) -> list[DeletedView]:
    return [replace(view, id="-") for view in views]


class Differential(RuleBasedStateMachine):
    """One example: a memory store and a fresh store of the backend under test, one clock."""

    stores: FreshStores

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.pair: tuple[RelayStore, RelayStore] = (
            self.run(self._open("memory://")),
            self.run(self._open(self.stores.url())),
        )
        self.now = START

    @staticmethod
    async def _open(url: str) -> RelayStore:
        return await open_store(url)

    def run(self, step: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(step)

    def both(self, call: Any) -> tuple[Any, Any]:
        memory, real = (self.run(call(store)) for store in self.pair)
        return memory, real

    def same(self, call: Any) -> None:
        memory, real = self.both(call)
        assert memory == real

    def teardown(self) -> None:
        try:
            for store in self.pair:
                self.run(store.close())
        finally:
            self.loop.close()

    @rule(step=ticks)
    def tick(self, step: int) -> None:
        self.now += step

    @rule(count=st.integers(1, 3))
    def allocate_revisions(self, count: int) -> None:
        self.same(lambda s: s.allocate_revisions(count, self.now))

    @rule(scopes=st.lists(st.sampled_from(SCOPES), max_size=2))
    def track_started(self, scopes: list[str]) -> None:
        self.same(lambda s: s.track_started(scopes, self.now))

    @rule(scope=st.sampled_from(SCOPES), seen=st.lists(st.sampled_from(SESSIONS), max_size=3))
    def record_started_in_one_scope(self, scope: str, seen: list[str]) -> None:
        sightings = {scope: [(sid, self.now) for sid in seen]}
        self.same(lambda s: s.record_started_scopes(sightings, self.now))

    @rule(scope=st.sampled_from(SCOPES), owner=st.sampled_from(OWNERS), lease=leases)
    def claim_started_in_one_scope(self, scope: str, owner: str, lease: int) -> None:
        self.same(lambda s: s.claim_started_scopes([scope], owner, self.now, lease, 2))

    @rule(scope=st.sampled_from(SCOPES), sessions=st.lists(st.sampled_from(SESSIONS)))
    def mark_started_sent(self, scope: str, sessions: list[str]) -> None:
        """The marks alone: a claim of no scope."""
        sent = [(scope, sid) for sid in sessions]
        self.same(lambda s: s.claim_started_scopes([], OWNERS[0], self.now, 1, sent=sent))

    @rule(
        seen=st.dictionaries(
            st.sampled_from(SCOPES), st.lists(st.sampled_from(SESSIONS), max_size=3), max_size=2
        )
    )
    def record_started_scopes(self, seen: dict[str, list[str]]) -> None:
        sightings = {scope: [(sid, self.now) for sid in sids] for scope, sids in seen.items()}
        self.same(lambda s: s.record_started_scopes(sightings, self.now))

    @rule(
        scopes=st.lists(st.sampled_from(SCOPES), max_size=2),
        owner=st.sampled_from(OWNERS),
        lease=leases,
        sent=st.lists(st.tuples(st.sampled_from(SCOPES), st.sampled_from(SESSIONS)), max_size=2),
    )
    def claim_started_scopes(
        self, scopes: list[str], owner: str, lease: int, sent: list[tuple[str, str]]
    ) -> None:
        self.same(lambda s: s.claim_started_scopes(scopes, owner, self.now, lease, 3, sent=sent))

    @rule(session=st.sampled_from(SESSIONS), live=st.booleans())
    def enqueue_deleted(self, session: str, live: bool) -> None:
        # Ids are random, and they break ties of `through`: a tick apart, there are none.
        self.now += 1
        memory, real = self.both(
            lambda s: s.enqueue_deleted(
                session, "default", self.now, session_live=live, identity=None, scope=None
            )
        )
        assert _views([memory]) == _views([real])

    @rule(owner=st.sampled_from(OWNERS), lease=leases)
    def claim_deleted(self, owner: str, lease: int) -> None:
        memory, real = self.both(lambda s: s.claim_deleted(owner, self.now, lease, 2))
        assert _views(memory) == _views(real)

    @rule(session=st.sampled_from(SESSIONS))
    def ack_deleted(self, session: str) -> None:
        answers = []
        for store in self.pair:
            views = [v for v in self.run(store.pending_deleted()) if v.session_id == session]
            if views:
                answers.append(self.run(store.ack_deleted(views[0].id, views[0].through)))
        assert answers in ([], [True, True], [False, False])

    @rule(tab=st.sampled_from(TABS), seq=st.integers(0, 3), active=st.booleans(), lease=leases)
    def apply_presence(self, tab: str, seq: int, active: bool, lease: int) -> None:
        self.same(
            lambda s: s.apply_presence(
                "default", tab, seq, active, self.now, lease_ms=lease, fence_ms=0, max_tabs=2
            )
        )

    def _turn(self, session: str, turn: int, phase: str, owner: str) -> RunState:
        started = START + (turn // 2) * SECOND
        return RunState(session, f"t{turn}", "default", "Chat", phase, started, self.now, owner)

    @rule(
        session=st.sampled_from(SESSIONS[:2]),
        turn=st.integers(0, 5),
        phase=phases,
        owner=st.sampled_from(OWNERS),
        lease=leases,
    )
    def pass_hosting_one(self, session: str, turn: int, phase: str, owner: str, lease: int) -> None:
        """A pass of a replica that hosts this one turn now."""
        live = [self._turn(session, turn, phase, owner)]
        self.same(
            lambda s: s.pass_write(owner, live, self.now, lease_ms=lease, retention_ms=RETENTION)
        )

    @rule(owner=st.sampled_from(OWNERS))
    def release_runs(self, owner: str) -> None:
        self.same(lambda s: s.release_runs(owner))

    @rule(owner=st.sampled_from(OWNERS), lease=leases)
    def keep_alive(self, owner: str, lease: int) -> None:
        self.same(lambda s: s.keep_alive(owner, self.now, lease))

    @rule(owner=st.sampled_from(OWNERS), scopes=st.lists(st.sampled_from(SCOPES), unique=True))
    def pass_view(self, owner: str, scopes: list[str]) -> None:
        self.same(lambda s: s.pass_view(owner, ["default", "work"], scopes, self.now))

    @rule(
        owner=st.sampled_from(OWNERS),
        hosted=st.dictionaries(st.sampled_from(SESSIONS[:2]), st.tuples(st.integers(0, 5), phases)),
        lease=leases,
    )
    def pass_write(self, owner: str, hosted: dict[str, tuple[int, str]], lease: int) -> None:
        live = [self._turn(s, turn, phase, owner) for s, (turn, phase) in sorted(hosted.items())]
        self.same(
            lambda s: s.pass_write(owner, live, self.now, lease_ms=lease, retention_ms=RETENTION)
        )

    @invariant()
    def whole_state(self) -> None:
        """Every read of whole state is the same on both."""
        self.same(lambda s: s.revision_floor())
        self.same(lambda s: s.started_ledger())
        self.same(lambda s: s.presence_leases())
        self.same(lambda s: s.run_states())
        memory, real = self.both(lambda s: s.pending_deleted())
        assert _views(memory) == _views(real)


def test_memory_and_a_real_backend_answer_alike(fresh_stores: FreshStores) -> None:
    """The same random run of ledger, outbox, presence, revision, run-state and pass calls gives
    the same answers and the same state on `memory://` as on this backend."""
    Differential.stores = fresh_stores
    run_state_machine_as_test(Differential)
