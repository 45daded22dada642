"""The previous release, built from the git history: the code of the schema head before the newest
migration, installed into a venv of its own, for the mixed-fleet tests.

The previous release is the parent of the commit that added the newest migration script. Its
venv is cached under `$XDG_CACHE_HOME/talaria-relay-tests/previous/<commit>`, keyed by the full
commit id, so a new migration (a new previous release) never reuses a venv of an older one; it
is built once (a lock keeps parallel test workers from building it twice) into a temporary
directory and renamed into place only when complete.
"""

from __future__ import annotations

import fcntl
import io
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from relay.store.sql.migrate import alembic_config, head_revision, script_location

ROOT = Path(__file__).resolve().parents[1]
GIT = shutil.which("git") or "git"


@dataclass(frozen=True)
class Release:
    """An installed previous release: its commit, schema head, interpreter and replica script."""

    commit: str
    head: str
    python: Path
    replica_proc: Path


def _git(*args: str) -> str:
    done = subprocess.run(
        [GIT, "-C", str(ROOT), *args], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def previous_commit() -> str:
    """The parent of the commit that added the newest migration script, when its schema head is
    the one just below (a migration added on a side branch that had not merged the one below yet
    is judged on its merge instead: the first parent of the commit that brought it in)."""
    from alembic.script import ScriptDirectory

    newest = head_revision()
    below = ScriptDirectory.from_config(alembic_config()).get_revision(newest).down_revision
    script = sorted(script_location().joinpath("versions").glob(f"{newest}_*.py"))[-1]
    path = str(script.relative_to(ROOT))
    candidates = []
    for how in ([], ["--first-parent"]):
        added = _git("log", *how, "--diff-filter=A", "--format=%H", "--", path).splitlines()
        if added:
            candidates.append(_git("rev-parse", f"{added[-1]}^1"))
    for commit in candidates:
        if _head_at(commit) == below:
            return commit
    raise LookupError(f"no commit before {path} was added has schema head {below} (shallow clone?)")


def _head_at(commit: str) -> str | None:
    """The newest migration's revision in `commit`'s tree."""
    names = _git("ls-tree", "--name-only", commit, "migrations/versions/").splitlines()
    found = sorted(Path(name).name[:4] for name in names if Path(name).name[:4].isdigit())
    return found[-1] if found else None


def _cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "talaria-relay-tests" / "previous"


def install(commit: str | None = None) -> Release:
    """The previous release (or `commit`'s code), built and installed once per commit."""
    commit = commit or previous_commit()
    home = _cache() / commit
    home.parent.mkdir(parents=True, exist_ok=True)
    with (home.parent / f"{commit}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "ready").exists():
            _build(commit, home)
    head = (home / "head").read_text().strip()
    return Release(
        commit, head, home / "venv" / "bin" / "python", home / "src" / "tests" / "replica_proc.py"
    )


def _build(commit: str, home: Path) -> None:
    building = home.with_name(f"{commit}.building")
    shutil.rmtree(building, ignore_errors=True)
    (building / "src").mkdir(parents=True)
    archive = subprocess.run(
        [GIT, "-C", str(ROOT), "archive", "--format=tar", commit],
        capture_output=True,
        check=True,
        timeout=120,
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(building / "src", filter="data")
    python = building / "venv" / "bin" / "python"
    # uv, which `make venv` puts beside this interpreter, makes the venv and builds and links
    # from its cache: on a new machine ~2 s where venv and pip took ~11 s. pip where uv is not.
    uv = Path(sys.executable).with_name("uv")
    if uv.exists():
        make = [str(uv), "venv", "--quiet", "--python", sys.executable, str(python.parents[1])]
        install_into = [str(uv), "pip", "install", "--compile-bytecode", "--python", str(python)]
    else:
        make = [sys.executable, "-m", "venv", str(python.parents[1])]
        install_into = [str(python), "-m", "pip", "install"]
    subprocess.run(make, check=True, timeout=300)
    subprocess.run([*install_into, "--quiet", str(building / "src")], check=True, timeout=900)
    head = subprocess.run(
        [str(python), "-c", "from relay.store.sql.migrate import head_revision as h; print(h())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=building,
    ).stdout.strip()
    (building / "head").write_text(head + "\n")
    # Its interpreter is run by path (`venv/bin/python`), so the venv works under its new name.
    shutil.rmtree(home, ignore_errors=True)
    building.rename(home)
    (home / "ready").write_text(commit + "\n")
