"""Crash safety of keys at rest: `talaria-relay rekey` killed (kill -9) at random moments.

    pytest tests/store/test_rekey_crash.py                  # 3 kills a backend, part of the suite
    pytest -m kills -s tests/store/test_rekey_crash.py      # 50 kills a backend, with the figures
    TALARIA_RELAY_REKEY_KILLS=200 pytest -m kills -s tests/store/test_rekey_crash.py

Each backend's store holds two keys: the one its registration names and one a rotation left
behind (two are enough to catch a move that lands on one and not the other; each costs the
command and the check their scrypt derivations). Round after round the real command moves them
on, plain → A → B → plain → …, told the current passphrase by TALARIA_RELAY_KEY_PASSPHRASE (or
_FILE) and the new one by a variable or a file it names, never by an argument. Each round's
command is killed once: every other round at a moment drawn from its start to a little past its
measured length (start-up, the scrypt derivations, the write, the exit), the others the instant
its write shows (`rekey_command.py`). The soak seals at the real scrypt cost, where most drawn
kills land inside a derivation; the suite's three kills at a cheap one (milliseconds: the
command's own `main` told the cost, `rekey_at_cost.py`), landing in the rest of its path;
`test_keyring` holds the real cost.

After each kill, from a fresh open of a copy of the store as the kill left it (so that the command
run again meets the store itself as it was left; Postgres: the store):

- it opens, and the registration still names its key;
- every key is whole and opens on the move's old side or its new one (plain, or one passphrase),
  to exactly the PEM it was made as;
- SQL: all of them on the same side (the move is one transaction), the `encrypted` column agreeing;
- JSON: the opening removed the killed command's temp files, no file came or went, every file is
  0600, and the files rekey does not write are as they were.

Then the same command, run again, finishes the move (exit 0) with every key on the new side, and
the store holds to the same checks; at the end the registration's key, loaded under the last
passphrase, signs as the original.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from backends import REAL, kill_runs, on
from cli_support import Result
from crash_writer import config_of, pem, registration
from databases import sessions_ended
from key_support import raw_keys, use_passphrase, write_private
from rekey_command import (
    PLAIN,
    SECRETS,
    TIMEOUT_S,
    UNCHANGED,
    Move,
    complete,
    derivation_s,
    json_temps,
    killed,
    moves,
    printed_secret,
)

from relay.errors import CorruptStateError, KeyPassphraseError, RelayError
from relay.publishing.signing import load_key
from relay.store import open_store
from relay.store.files.lock import LOCK
from relay.store.files.state import KEY_FILE
from relay.store.keys import pkcs8
from relay.store.keys.keyring import Keyring, Passphrase

SHORT_KILLS = 3  # one of each move
SHORT_SCRYPT_LOG_N = 12  # 4 MiB, a few ms a derivation: the real one (17) is the soak's
LONG_KILLS = int(os.environ.get("TALARIA_RELAY_REKEY_KILLS", "50"))
KEY_IDS = ("key-0", "key-1")  # the last is the registration's
# A drawn kill lands up to 20% past the command's expected length: some find it ended.
SPREAD = 1.2


@dataclass
class Tally:
    kills: int = 0
    at_write: int = 0  # kills sent as the write showed
    inside: int = 0  # ... that left keys on the old side: the write had not taken effect
    left: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("old", "new", "mixed"), 0))
    finished: int = 0  # commands that had ended before their kill
    temps: int = 0  # JSON temp files the killed commands left


@dataclass
class RekeyRun:
    """One backend's store, the keys it was given, and what the kills found."""

    url: str
    backend: str
    home: Path
    scratch: Path  # where the check's copy of a file store goes
    rng: random.Random
    originals: dict[str, str] = field(default_factory=dict)  # reference -> the PEM it was made as
    registered: str = ""  # the reference the registration names
    files: dict[str, bytes] = field(default_factory=dict)  # JSON: the files rekey never writes
    # Stored text -> (its side, the PEM it opens to): a text is opened once, the same bytes
    # opening the same way, so the check derives only for what a command wrote.
    opened: dict[str, tuple[str, str]] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    violations: list[str] = field(default_factory=list)
    unchanged_s: float = 0.0  # the command's length without a derivation
    derivation_s: float = 0.0  # one scrypt derivation at the cost keys are sealed at

    @property
    def state_dir(self) -> Path:
        return Path(self.url.removeprefix("json://"))

    def as_left(self) -> str:
        """The URL of a copy of the store as the kill left it, for the check to open: the command
        run again then meets the store itself as it was left (a JSON temp file, a SQLite WAL to
        recover), as an operator's would. Postgres recovers by itself: its own URL."""
        if self.backend == "postgres":
            return self.url
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.backend == "json":
            shutil.copytree(self.state_dir, self.scratch)  # with each file's mode
            return f"json://{self.scratch}"
        self.scratch.mkdir()
        database = Path(self.url.removeprefix("sqlite:///"))
        for source in database.parent.glob(f"{database.name}*"):  # the WAL and its index too
            shutil.copy2(source, self.scratch / source.name)
        return f"sqlite:///{self.scratch / database.name}"

    def say(self, step: str, problem: str) -> None:
        self.violations.append(f"{step}: {problem}")

    async def seed(self) -> None:
        """Three plain keys and a registration naming the last, as rotations leave a store."""
        async with open_store(self.url) as store:
            for key_id in KEY_IDS:
                made = pem(f"rekey/{self.backend}/{key_id}")
                self.registered = await store.save_key(key_id, made)
                self.originals[self.registered] = made
            await store.save_config(config_of(registration(KEY_IDS[-1], self.registered, "rekey")))
        if self.backend == "json":
            self.files = {
                path.name: path.read_bytes()
                for path in self.state_dir.iterdir()
                if path.name != LOCK and KEY_FILE.fullmatch(path.name) is None
            }

    def calibrate(self) -> None:
        """Time the command when it derives nothing, and a derivation, to know how long each
        move runs."""
        self.unchanged_s = self.finish("calibration", UNCHANGED).seconds
        self.derivation_s = derivation_s()

    # ── the command ───────────────────────────────────────────────────────────

    def finish(self, step: str, move: Move) -> Result:
        """Run the move's command to its end: it must exit 0, every key moved."""
        result = complete(self.url, self.home, move)
        if printed_secret(result.output):
            self.say(step, "the command printed a passphrase or a key")
        if result.code != 0 or f"{len(KEY_IDS)} key(s), all stored" not in result.stdout:
            self.say(step, f"the command did not finish the move:\n{result.describe()}")
        return result

    async def kill(self, step: str, move: Move, *, at_write: bool) -> bool:
        """Run the move's command and kill -9 it; whether it had ended (exit 0) before."""
        expected_s = self.unchanged_s + len(KEY_IDS) * move.derivations * self.derivation_s
        delay = None if at_write else self.rng.uniform(0, SPREAD * expected_s)
        result = await killed(self.url, self.backend, self.home, move, delay, self.rng)
        self.tally.kills += 1
        self.tally.at_write += at_write
        if printed_secret(result.output):
            self.say(step, "the command printed a passphrase or a key")
        if result.code == -signal.SIGKILL:
            return False
        self.tally.finished += 1
        if result.code != 0:
            self.say(step, f"the command failed before its kill:\n{result.describe()}")
        return True

    # ── the store after a command ─────────────────────────────────────────────

    async def check(self, step: str, sides: tuple[str, ...], url: str) -> set[str]:
        """Open the store at `url` afresh and hold every key to `sides`; the sides they are on."""
        if self.backend == "postgres" and not await sessions_ended(self.url, TIMEOUT_S):
            self.say(step, "the killed command's session never ended")
        stored: dict[str, str] = {}
        try:
            async with open_store(url) as store:
                config = await store.load_config()
                for ref in self.originals:
                    try:
                        stored[ref] = await store.stored_key(ref)
                    except CorruptStateError as error:  # missing, truncated, not a key
                        self.say(step, f"key {ref}: {error}")
        except RelayError as error:
            self.say(step, f"the store does not open: {error!r}")
            raise AssertionError("\n".join(self.violations[-20:])) from error
        if config is None or config.key_ref != self.registered:
            self.say(step, f"the registration no longer names key {self.registered}: {config}")
        found = {ref: self.side(ref, text, sides) for ref, text in stored.items()}
        for ref, side in found.items():
            if side is None:
                self.say(step, f"key {ref} does not open on a side of {sides} as it was made")
        on = {side for side in found.values() if side is not None}
        if self.backend == "json":
            self.check_dir(step, Path(url.removeprefix("json://")))
        else:
            if len(on) > 1:
                self.say(step, f"keys on different sides, so not one transaction: {found}")
            await self.check_rows(step, url)
        return on

    def side(self, ref: str, text: str, sides: tuple[str, ...]) -> str | None:
        """Which of `sides` the stored `text` is on, if it opens there to the PEM `ref` was made as.

        A text that one passphrase opens is on that side alone: for another to open it too, two
        scrypt derivations would have to give one AES key.
        """
        if text not in self.opened:
            opened = _open(ref, text, sides)
            if opened is None:
                return None
            self.opened[text] = opened
        side, made = self.opened[text]
        return side if side in sides and made == self.originals[ref] else None

    async def check_rows(self, step: str, url: str) -> None:
        """SQL: the rows are the keys given, each `encrypted` flag saying what its PEM is."""
        rows = await raw_keys(url)
        if set(rows) != set(self.originals):
            self.say(step, f"the keys are {sorted(rows)}, not {sorted(self.originals)}")
        for ref, (text, flag) in rows.items():
            if flag is not pkcs8.is_encrypted(text):
                self.say(step, f"key {ref}: encrypted is {flag}, not what its PEM is")

    def check_dir(self, step: str, state_dir: Path) -> None:
        """JSON, after an open: no temp file, no file more or less, all 0600, the rest unchanged."""
        if left := json_temps(state_dir):
            self.say(step, f"temp files left after an open: {left}")
        paths = {path.name: path for path in state_dir.iterdir()}
        expected = {LOCK, *self.files, *(Path(ref).name for ref in self.originals)}
        if set(paths) != expected:
            self.say(step, f"the state dir holds {sorted(paths)}, not {sorted(expected)}")
        for name, path in sorted(paths.items()):
            if (mode := path.stat().st_mode & 0o777) != 0o600:
                self.say(step, f"{name} has mode {mode:o}")
            if name in self.files and path.read_bytes() != self.files[name]:
                self.say(step, f"{name} changed, and rekey does not write it")

    async def signs(self, monkeypatch: pytest.MonkeyPatch, side: str) -> None:
        """The registration's key, loaded as the publisher loads it under the passphrase of
        `side`, is the original and signs as it."""
        use_passphrase(monkeypatch, SECRETS.get(side))
        async with open_store(self.url) as store:
            config = await store.load_config()
            assert config is not None
            loaded = await store.load_key(config.key_ref)
        use_passphrase(monkeypatch, None)
        made = self.originals[self.registered]
        assert loaded == made
        message = b"PUT /v1/publishers/snapshot"
        load_key(made).public_key().verify(load_key(loaded).sign(message), message)

    def report(self, seconds: float) -> str:
        t = self.tally
        temps = f"; {t.temps} temp files removed on open" if self.backend == "json" else ""
        return (
            f"rekey crash test [{self.backend}]: {t.kills} kills ({t.at_write} as the write "
            f"showed, {t.inside} of them before it took effect; the rest over 0-{SPREAD:g}x "
            f"the command's length), leaving every key on "
            f"the old side {t.left['old']}, on the new {t.left['new']}, mixed {t.left['mixed']}; "
            f"{t.finished} commands had ended before their kill{temps}; "
            f"{len(self.violations)} violations; {seconds:.1f} s (a derivation "
            f"{self.derivation_s:.2f} s, the command without one {self.unchanged_s:.2f} s)"
        )


def _open(ref: str, text: str, sides: tuple[str, ...]) -> tuple[str, str] | None:
    """The side the stored `text` opens on, of those in `sides`, and the PEM it opens to."""
    if not pkcs8.is_encrypted(text):
        return PLAIN, text
    for side in sides:
        if side != PLAIN:
            with contextlib.suppress(KeyPassphraseError, CorruptStateError):
                return side, Keyring(Passphrase(SECRETS[side].encode(), side)).open(text, ref)
    return None


# A memory store lives and dies with its process: there is nothing to crash into.
@on(*REAL)
@kill_runs(SHORT_KILLS, LONG_KILLS)
async def test_a_killed_rekey_leaves_every_key_whole_and_resumes(
    store_url: str,
    backend: str,
    kills: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """After each of `kills` kill -9s of a rekey, every key is whole on the old or the new side,
    and the same command run again finishes the move."""
    if request.node.get_closest_marker("kills") is None:  # the suite's short run
        monkeypatch.setattr(pkcs8, "SCRYPT_LOG_N", SHORT_SCRYPT_LOG_N)
    secret_file = tmp_path / "passphrase-b"
    write_private(secret_file, SECRETS["B"] + "\n")
    home = tmp_path / "xdg"
    home.mkdir()
    rng = random.Random(f"rekey/{backend}/{kills}")
    run_ = RekeyRun(store_url, backend, home, tmp_path / "as-left", rng)
    started = time.monotonic()
    await run_.seed()
    run_.calibrate()
    cycle = moves(secret_file)
    for round_ in range(kills):
        move = cycle[round_ % len(cycle)]
        step = f"round {round_} ({move})"
        at_write = round_ % 2 == 1
        finished = await run_.kill(step, move, at_write=at_write)
        if backend == "json":
            run_.tally.temps += len(json_temps(run_.state_dir))  # as the kill left them
        found = await run_.check(step, (move.old, move.new), run_.as_left())
        run_.tally.inside += at_write and not finished and move.old in found
        run_.tally.left[
            "old" if found == {move.old} else "new" if found == {move.new} else "mixed"
        ] += 1
        if finished and found != {move.new}:
            run_.say(step, f"the command exited 0 with keys on {found}")
        run_.finish(f"{step}, run again", move)
        if await run_.check(f"{step}, run again", (move.new,), store_url) != {move.new}:
            run_.say(f"{step}, run again", "not every key is on the new side")
    await run_.signs(monkeypatch, cycle[(kills - 1) % len(cycle)].new)
    print(run_.report(time.monotonic() - started))
    assert not run_.violations, "\n".join(run_.violations[:20])
