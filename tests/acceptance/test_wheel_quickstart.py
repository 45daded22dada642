"""The README's quick start and first commands run from the built wheel, outside the checkout
(issue 31): a file the wheel lacks fails here, not on a user's machine.

The wheel goes into a new virtual environment of its own; its dependencies are those of this
environment (a path line, read after the new environment's own site-packages), so the test needs
no network and takes seconds. The checkout is on no path of the child: `relay` is the wheel's.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

# One worker runs the module (`--dist loadgroup`), which builds the wheel and its venv once.
pytestmark = pytest.mark.xdist_group("wheel")

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = re.search(
    r"<!-- example: quickstart -->\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S
)


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment holding only the wheel built from this checkout."""
    where = tmp_path_factory.mktemp("wheel")
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("hatchling") else []
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "--quiet", "--no-deps", *isolation, "-w", str(where), str(ROOT)],
        check=True,
        timeout=300,
    )
    (wheel,) = where.glob("talaria_relay-*.whl")
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            *pip,
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        timeout=120,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # The dependencies, from this environment: appended to the path, after the wheel's own.
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def child(venv: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TALARIA_RELAY"))}
    env["XDG_STATE_HOME"] = str(cwd / "state")
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_quick_start_runs_from_the_wheel(wheel_env: Path, tmp_path: Path) -> None:
    """`python quickstart.py` in an empty folder, with the wheel installed, prints what the
    README says, twice; and `relay` is the wheel's, not the checkout's."""
    assert QUICKSTART is not None
    (tmp_path / "quickstart.py").write_text(QUICKSTART.group(1))
    python = str(wheel_env / "bin" / "python")
    where = child(wheel_env, [python, "-c", "import relay; print(relay.__file__)"], tmp_path)
    assert where.stdout.startswith(str(wheel_env)), where.stdout + where.stderr
    for _ in range(2):
        done = child(wheel_env, [python, "quickstart.py"], tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip().splitlines()[-1] == "['chat-1']", done.stdout


def test_the_command_line_runs_from_the_wheel(wheel_env: Path, tmp_path: Path) -> None:
    """The wheel's `talaria-relay` migrates a store from the migrations it carries, and its
    demo passes."""
    store = f"sqlite:///{tmp_path / 'relay.db'}"
    migrated = child(wheel_env, ["talaria-relay", "migrate", "--store", store], tmp_path)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert "at head" in migrated.stdout or "applied" in migrated.stdout, migrated.stdout
    demo = child(wheel_env, ["talaria-relay", "demo"], tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert demo.stdout.strip().splitlines()[-1].startswith("OK: the relay accepted")
