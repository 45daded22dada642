"""`make demo` installs `.[devrelay]` only, and that is all the demo needs: it runs with every
package of the test toolchain and the other extras out of reach."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Importable names of what `.[devrelay]` leaves out: the test extra's tools, the other extras.
BLOCKED = (
    "starlette",
    "fastapi",
    "flask",
    "gunicorn",
    "opentelemetry",
    "pytest",
    "hypothesis",
    "mypy",
    "ruff",
    "yaml",
    "hatchling",
)
BLOCKER = f"""
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in .[devrelay])", name=name)
        return None

sys.meta_path.insert(0, Blocked())
from relay.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_make_demo_installs_the_devrelay_extra_only(tmp_path: Path) -> None:
    """On a fresh clone `make demo` installs the project with its `devrelay` extra and no
    other, then runs the demo; that extra is the dev relay's server and nothing else."""
    make = shutil.which("make")
    assert make is not None, "the README's two commands need make"
    # A make of its own, as from a shell: not a sub-make of `make test` (which prints its folder).
    shell = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    planned = subprocess.run(
        [make, "--dry-run", f"VENV={tmp_path / 'venv'}", "demo"],
        cwd=ROOT, env=shell, capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    installs = [line for line in planned.splitlines() if " install " in line]
    assert [re.findall(r"'\.\[(\w+)\]'", line) for line in installs] == [[], ["devrelay"]], planned
    assert planned.splitlines()[-1].endswith("/bin/talaria-relay demo"), planned
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [re.split(r"[<>=\[]", d)[0] for d in extras["optional-dependencies"]["devrelay"]] == [
        "uvicorn"
    ]


def test_the_demo_runs_without_the_test_toolchain(tmp_path: Path) -> None:
    """`talaria-relay demo` passes with every module outside `.[devrelay]` unimportable."""
    result = subprocess.run(
        [sys.executable, "-c", BLOCKER, "demo", "--store", f"sqlite:///{tmp_path / 'demo.db'}"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "XDG_STATE_HOME": str(tmp_path / "state")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("OK: the relay accepted")


# The same, with uvicorn (the `devrelay` extra) out of reach too.
NO_DEVRELAY = BLOCKER.replace(f"{BLOCKED!r}", f"{(*BLOCKED, 'uvicorn')!r}")
QUICKSTART = re.search(
    r"<!-- example: quickstart -->\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S
)


def test_without_the_extra_the_demo_names_it_and_keeps_its_store(tmp_path: Path) -> None:
    """Without uvicorn, `demo` exits 2 naming `pip install 'talaria-relay[devrelay]'`, and the
    demo store of an earlier run is left as it was (it used to be reset first)."""
    state = tmp_path / "state"
    demo_db = state / "talaria-relay" / "demo.db"
    demo_db.parent.mkdir(parents=True)
    demo_db.write_bytes(b"an earlier demo's store")
    result = subprocess.run(
        [sys.executable, "-c", NO_DEVRELAY, "demo"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "XDG_STATE_HOME": str(state)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pip install 'talaria-relay[devrelay]'" in result.stderr
    assert "Traceback" not in result.stderr
    assert demo_db.read_bytes() == b"an earlier demo's store"


def test_without_the_extra_the_quick_start_names_it(tmp_path: Path) -> None:
    """The README's quick start without uvicorn fails with `MissingExtraError` naming the extra
    to install, not a bare `ModuleNotFoundError`."""
    assert QUICKSTART is not None
    (tmp_path / "quickstart.py").write_text(QUICKSTART.group(1))
    runner = NO_DEVRELAY.replace(
        "from relay.cli import main\nsys.exit(main(sys.argv[1:]))",
        "import runpy\nrunpy.run_path('quickstart.py', run_name='__main__')",
    )
    result = subprocess.run(
        [sys.executable, "-c", runner],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "XDG_STATE_HOME": str(tmp_path / "state")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("relay.errors.MissingExtraError: the dev relay needs uvicorn"), last
    assert "pip install 'talaria-relay[devrelay]'" in last
