"""`make demo` installs `.[devrelay]` only, and that is all the demo needs: it runs with every
package of the test toolchain and the other extras out of reach."""

from __future__ import annotations

import re
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


def test_make_demo_installs_the_devrelay_extra_only() -> None:
    """The demo target's environment is `pip install -e '.[devrelay]'`, and that extra is the
    dev relay's server and nothing else."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^\$\(BIN\)/\.demo-installed:.*?(?=^\S)", makefile, re.M | re.S)
    assert recipe is not None, "no .demo-installed stamp in the Makefile"
    assert "-e '.[devrelay]'" in recipe.group(0)
    assert re.search(r"^demo: \$\(BIN\)/\.demo-installed$", makefile, re.M)
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
