"""Run state and deletion claims in the state dir: files of our own beside the legacy ones.

Both are tolerant: a lost run row is republished by the replica hosting it on its next pass, and a
lost claim only lets another process deliver the same deletion again, which the relay takes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

from relay.errors import InvalidInputError
from relay.store.files.documents import (
    _DELETED,
    _STARTED,
    Check,
    _count,
    _Document,
    _is,
    _json,
    _json_text,
    _member,
    _text,
    _values,
)
from relay.store.files.io import _read, _write
from relay.store.files.locked import LockedDir
from relay.store.records import DeletedView, RunState
from relay.store.rules import ledger, outbox
from relay.store.rules import runs as run_rules

R = TypeVar("R")

_RUN: dict[str, Check] = {
    "sessionId": _text,
    "streamId": _is(str | None),
    "profile": _is(str | None),
    "title": _text,
    "phase": _text,
    "startedAt": _count,
    "updatedAt": _count,
    "owner": _text,
    "leaseUntil": _count,
    "sendingBy": _is(str | None),
    "sendingUntil": _count,
}


def _parse_runs(raw: bytes | None) -> run_rules.Runs:
    runs: run_rules.Runs = {}
    for item in _member(_json(raw), "runs", list) or ():
        if (values := _values(item, _RUN)) is not None:
            try:
                run = RunState(*values)
            except InvalidInputError:
                continue
            runs.setdefault(run.session_id, run)
    return runs


def _dump_runs(runs: run_rules.Runs) -> str:
    items = [dict(zip(_RUN, asdict(runs[sid]).values(), strict=True)) for sid in sorted(runs)]
    return _json_text({"version": 1, "runs": items})


def _parse_forgotten(raw: bytes | None) -> run_rules.Forgotten:
    forgotten: run_rules.Forgotten = {}
    check = {"startedAt": _count, "streamId": _is(str | None), "forgottenAt": _count}
    for sid, item in (_member(_json(raw), "turns", dict) or {}).items():
        if (values := _values(item, check)) is not None:
            forgotten[sid] = ((values[0], values[1] or ""), values[2])
    return forgotten


def _dump_forgotten(forgotten: run_rules.Forgotten) -> str:
    turns = {
        sid: {"startedAt": started, "streamId": stream or None, "forgottenAt": at}
        for sid, ((started, stream), at) in sorted(forgotten.items())
    }
    return _json_text({"version": 1, "turns": turns})


def _parse_claims(raw: bytes | None) -> outbox.Claims:
    claims: outbox.Claims = {}
    for view_id, item in (_member(_json(raw), "deleted", dict) or {}).items():
        if (values := _values(item, {"owner": _text, "until": _count})) is not None:
            claims[view_id] = (values[0], values[1])
    return claims


def _dump_claims(claims: outbox.Claims) -> str:
    deleted = {k: {"owner": o, "until": u} for k, (o, u) in sorted(claims.items())}
    return _json_text({"version": 1, "deleted": deleted})


_RUNS = _Document("talaria-relay-runs.json", _parse_runs, _dump_runs)
_CLAIMS = _Document("talaria-relay-claims.json", _parse_claims, _dump_claims)
# A lost file of forgotten turns lets a replica's older turn of a pruned session be saved again:
# what the store had before it remembered them, no worse.
_FORGOTTEN = _Document("talaria-relay-turns.json", _parse_forgotten, _dump_forgotten)


class RunFiles(LockedDir):
    """The run-state and deletion-claim hooks of `StoreGate` on the state dir."""

    async def _together(self, docs: tuple[_Document[Any], ...], edit: Callable[..., R]) -> R:
        """`edit` the documents' values in place under one lock; rewrite those it changed."""

        def work() -> R:
            with self._locked(exclusive=True):
                values = [doc.parse(_read(self._dir / doc.name)) for doc in docs]
                before = [doc.dump(value) for doc, value in zip(docs, values, strict=True)]
                result = edit(*values)
                for doc, value, old in zip(docs, values, before, strict=True):
                    if (new := doc.dump(value)) != old:
                        _write(self._dir / doc.name, new)
                return result

        return await self._call(work)

    async def _save_run(self, run: RunState, until: int) -> bool:
        def edit(runs: run_rules.Runs, forgotten: run_rules.Forgotten) -> bool:
            return run_rules.save(runs, forgotten, run, until)

        return await self._together((_RUNS, _FORGOTTEN), edit)

    async def _sync_runs(
        self,
        owner: str,
        live: list[RunState],
        now_ms: int,
        until: int,
        cutoff: int,
        forget_before: int,
    ) -> list[RunState]:
        def edit(runs: run_rules.Runs, forgotten: run_rules.Forgotten) -> list[RunState]:
            return run_rules.sync(
                runs, forgotten, owner, live, now_ms, until, cutoff, forget_before
            )

        return await self._together((_RUNS, _FORGOTTEN), edit)

    async def _keep_alive(self, owner: str, now_ms: int, until: int) -> int | None:
        def edit(
            runs: run_rules.Runs, led: ledger.Ledger, views: outbox.Outbox, claims: outbox.Claims
        ) -> int | None:
            run_rules.renew(runs, owner, until)
            held = outbox.held(views, claims)
            return run_rules.next_lease_end(owner, now_ms, runs, ledger.unsent(led), held)

        return await self._together((_RUNS, _STARTED, _DELETED, _CLAIMS), edit)

    async def _release_runs(self, owner: str) -> None:
        await self._together((_RUNS,), lambda runs: run_rules.release(runs, owner))

    async def _run_states(self) -> list[RunState]:
        runs = await self._load(_RUNS)
        return [runs[sid] for sid in sorted(runs)]

    async def _claim_deleted(
        self, owner: str, now_ms: int, until: int, limit: int | None
    ) -> list[DeletedView]:
        def edit(views: outbox.Outbox, claims: outbox.Claims) -> list[DeletedView]:
            return outbox.claim(views, claims, owner, now_ms, until, limit)

        return await self._together((_DELETED, _CLAIMS), edit)
