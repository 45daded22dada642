"""Crash safety: a writer process killed (kill -9) at random moments inside every kind of write.

    pytest tests/store/test_crash.py                  # 20 kills a backend, part of the suite
    pytest -m kills -s                          # 200 kills a backend, with the figures
    TALARIA_RELAY_KILLS=500 pytest -m kills -s

One store a backend lives through all the kills, so state piles up across crashes. The writer
(`crash_writer.py`) announces each write before it calls the method and acknowledges it once
the method returned. After each kill the test opens the store afresh and holds it to the model
(`crash_model.py`) of the acknowledged writes:

- the store opens and reads back;
- it is exactly the model, or the model with the write that was under way applied: every record
  old or new, all of them from one side;
- revisions rise across kills, above every acknowledged one;
- no acknowledged ledger entry, deletion, claim, identity, key, lease or run is lost or doubled;
- the registration's generation never goes back;
- JSON: no file in the state dir is ever truncated, and opening removes the killed writer's temps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import forked
from backends import REAL, kill_runs, on
from crash_model import Model, differences, matches, observe
from crash_writer import BASE, KEY_IDS, ROUND_MS, SCOPES, clock, encoded, invocation, pem
from crash_writer import registration as registration_data
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from databases import sessions_ended

from relay.errors import RelayError
from relay.store import open_store
from relay.store.files.io import TEMP
from relay.store.files.lock import LOCK
from relay.store.files.state import KEY_FILE

WRITER = Path(__file__).parents[1] / "crash_writer.py"
SHORT_KILLS = 20
LONG_KILLS = int(os.environ.get("TALARIA_RELAY_KILLS", "200"))
# A kill lands 0-300 ms after the writer is ready: tens of writes in, inside one of them.
KILL_WINDOW_S = 0.3
# Now and then a kill lands while the writer opens the store (a SQLite file migrates, a JSON
# state dir is swept).
EARLY_SHARE, EARLY_WINDOW_S = 0.1, 1.0
TIMEOUT_S = 60.0


@dataclass
class Tally:
    kills: int = 0
    acknowledged: int = 0
    under_way: int = 0  # kills that found a write announced and not acknowledged
    applied: int = 0  # ... and the store holding its result
    early: int = 0  # kills before the writer had opened the store
    temps: int = 0
    temp_kills: int = 0


@dataclass
class CrashRun:
    """One backend's store, its model, and what the kills found."""

    url: str
    backend: str
    rng: random.Random
    model: Model = field(default_factory=Model)
    tally: Tally = field(default_factory=Tally)
    violations: list[str] = field(default_factory=list)
    last_revision: int = 0
    generation: int = 0
    saved: bool = False  # a registration save was acknowledged since the last check

    @property
    def state_dir(self) -> Path:
        return Path(self.url.split("://", 1)[1])

    async def seed(self) -> None:
        """Both keys, a registration and two ledger scopes, before the first writer."""
        async with open_store(self.url) as store:

            async def call(op: str, **args: Any) -> Any:
                positional, keywords = invocation(op, args)
                answer = encoded(await getattr(store, op)(*positional, **keywords))
                self.violations += self.model.apply(op, args, answer)
                return answer

            refs = [await call("save_key", key_id=k, pem=pem(f"seed/{k}")) for k in KEY_IDS]
            await call("save_config", config=registration_data(KEY_IDS[0], refs[0], "seed"))
            await call("track_started", profile_ids=list(SCOPES), now_ms=BASE - ROUND_MS)
            self.generation = (await store.load_config() or _absent()).generation

    async def kill(self, round_: int) -> list[bytes]:
        """Run round `round_`'s writer, kill -9 it at a random moment; the lines it wrote."""
        process = await forked.start(WRITER, self.url, str(round_))
        lines: list[bytes] = []
        ready = asyncio.Event()

        async def read(stdout: asyncio.StreamReader) -> None:
            # Read all along: a writer blocked on a full pipe would be killed there, not in a write.
            async for line in stdout:
                lines.append(line)
                ready.set()

        reader = asyncio.create_task(read(process.stdout))
        errors = asyncio.create_task(process.captured_stderr.read())
        if self.rng.random() < EARLY_SHARE:
            await asyncio.sleep(self.rng.uniform(0, EARLY_WINDOW_S))
        else:
            waits = [asyncio.create_task(ready.wait()), asyncio.create_task(process.wait())]
            await asyncio.wait(waits, timeout=TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()
            await asyncio.sleep(self.rng.uniform(0, KILL_WINDOW_S))
        with contextlib.suppress(ProcessLookupError):  # it ended by itself: reported below
            os.kill(process.pid, signal.SIGKILL)
        code = await process.wait()
        await reader
        self.tally.early += not ready.is_set()
        stderr = await errors
        if code != -signal.SIGKILL:
            tail = stderr.decode(errors="replace")[-2000:]
            self.violations.append(f"round {round_}: the writer exited ({code}) by itself: {tail}")
        self.tally.kills += 1
        return lines

    def replay(
        self, round_: int, lines: list[bytes]
    ) -> tuple[tuple[str, dict[str, Any]] | None, int]:
        """Apply the acknowledged writes to the model: the write under way, the probe's time."""
        under_way: tuple[str, dict[str, Any]] | None = None
        probe_ms = clock(round_, 0)
        for raw in lines:
            if not raw.endswith(b"\n"):
                continue  # torn by the kill: an announcement's method was not called yet
            line = json.loads(raw)
            if "op" in line:
                under_way = (line["op"], line["args"])
                probe_ms = max(probe_ms, line["args"].get("now_ms", 0))
            elif "ok" in line:
                assert under_way is not None
                op = under_way[0]
                answer = line["ok"]
                self.violations += [
                    f"round {round_}: {v}" for v in self.model.apply(*under_way, answer)
                ]
                if op == "allocate_revisions":
                    self.check_revisions(round_, answer)
                self.saved |= op == "save_config"
                self.tally.acknowledged += 1
                under_way = None
        return under_way, probe_ms

    def check_revisions(self, round_: int, revisions: list[int]) -> None:
        """Each allocation is consecutive and above every one acknowledged before, in any round."""
        if revisions[0] <= self.last_revision or revisions != list(
            range(revisions[0], revisions[0] + len(revisions))
        ):
            self.violations.append(
                f"round {round_}: revisions {revisions} after {self.last_revision} acknowledged"
            )
        self.last_revision = revisions[-1]

    async def check(
        self, round_: int, under_way: tuple[str, dict[str, Any]] | None, probe_ms: int
    ) -> None:
        """Open the store afresh and hold it to the model, before or after the write under way."""
        say = self.violations.append
        if self.backend == "json":
            self.check_files(round_)
        elif self.backend == "postgres":
            await self.writer_gone(round_)
        try:
            async with open_store(self.url) as store:
                if self.backend == "json" and (left := self.temps()):
                    say(f"round {round_}: opening the store left temp files {left}")
                seen, probed = await observe(store, list(self.model.refs.values()), probe_ms)
        except RelayError as error:
            # Nothing to go on from: the kills so far end here.
            say(f"round {round_}: the store does not open or read back: {error!r}")
            raise AssertionError("\n".join(self.violations[-20:])) from error
        if seen["duplicates"]:
            say(f"round {round_}: doubled: {seen['duplicates']}")
        before = self.model.sections(probe_ms)
        after = None
        if under_way is not None:
            self.tally.under_way += 1
            after = self.model.copy()
            after.apply(*under_way)
        if matches(before, seen):
            self.model.settle(seen, probe_ms, probed)
        elif after is not None and matches(after.sections(probe_ms), seen):
            self.tally.applied += 1
            self.model = after
            self.model.settle(seen, probe_ms, probed)
        else:
            name = under_way[0] if under_way else "no write"
            found = [f"before {name}:", *differences(before, seen)[:10]]
            if after is not None:
                found += [f"after {name}:", *differences(after.sections(probe_ms), seen)[:10]]
            say(f"round {round_}: the store is neither before nor after:\n  " + "\n  ".join(found))
            self.model.adopt(seen, probe_ms, probed)
        self.check_generation(round_, seen["generation"])
        if seen["revision floor"] < self.last_revision:
            say(f"round {round_}: revision floor {seen['revision floor']} < {self.last_revision}")

    def check_generation(self, round_: int, generation: int) -> None:
        """A registration's generation never goes back, and it moves on with every save."""
        if generation < self.generation or (self.saved and generation == self.generation):
            self.violations.append(
                f"round {round_}: registration generation {generation} after {self.generation}"
            )
        self.generation, self.saved = generation, False

    # ── JSON ──────────────────────────────────────────────────────────────────

    def temps(self) -> list[str]:
        return sorted(name for name in os.listdir(self.state_dir) if TEMP.fullmatch(name))

    def check_files(self, round_: int) -> None:
        """Every file the killed writer left is whole; count its temp files."""
        if temps := self.temps():
            self.tally.temps += len(temps)
            self.tally.temp_kills += 1
        for path in sorted(self.state_dir.iterdir()):
            if path.name == LOCK or TEMP.fullmatch(path.name):
                continue
            if (problem := _damage(path)) is not None:
                self.violations.append(f"round {round_}: {path.name} {problem}")

    # ── Postgres ──────────────────────────────────────────────────────────────

    async def writer_gone(self, round_: int) -> None:
        """Wait until the server is done with the killed writer's sessions."""
        if not await sessions_ended(self.url, TIMEOUT_S):
            self.violations.append(f"round {round_}: the killed writer's sessions never ended")

    def report(self, seconds: float) -> str:
        t = self.tally
        temps = f", {t.temps} stale temp files in {t.temp_kills} kills removed on open"
        return (
            f"crash test [{self.backend}]: {t.kills} kills ({t.early} while opening), "
            f"{t.acknowledged} acknowledged writes checked, {t.under_way} kills inside a write "
            f"({t.applied} of them applied), {len(self.violations)} violations, "
            f"{seconds:.1f} s{temps if self.backend == 'json' else ''}"
        )


def _absent() -> Any:
    raise AssertionError("the seed's registration is missing")


def _damage(path: Path) -> str | None:
    """What is wrong with a state file a killed writer left, if anything."""
    raw = path.read_bytes()
    try:
        if path.suffix == ".json":
            if not isinstance(json.loads(raw), dict):
                return "is not a JSON object"
        elif path.name == "talaria-relay-revision":
            if re.fullmatch(rb"[0-9]+\n", raw) is None:
                return f"is not a revision: {raw[:40]!r}"
        elif KEY_FILE.fullmatch(path.name):
            load_pem_private_key(raw, password=None)
        else:
            return "should not be there"
    except ValueError as error:
        return f"is truncated or unreadable ({error})"
    return None


# A memory store lives and dies with its process: there is nothing to crash into.
@on(*REAL)
@kill_runs(SHORT_KILLS, LONG_KILLS)
async def test_a_killed_writer_loses_nothing_acknowledged(
    store_url: str, backend: str, kills: int
) -> None:
    """After each of `kills` kill -9s inside writes, the store holds every acknowledged write."""
    run = CrashRun(store_url, backend, random.Random(f"{backend}/{kills}"))
    started = time.monotonic()
    await run.seed()
    for round_ in range(kills):
        lines = await run.kill(round_)
        under_way, probe_ms = run.replay(round_, lines)
        await run.check(round_, under_way, probe_ms)
    print(run.report(time.monotonic() - started))
    assert run.tally.acknowledged > kills, "the writers were killed before they wrote anything"
    assert not run.violations, "\n".join(run.violations[:20])
