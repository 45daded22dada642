"""README.md's library example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def example(name: str) -> str:
    text = README.read_text()
    match = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", text, re.DOTALL)
    assert match, f"README.md has no example {name!r}"
    return match.group(1)


def test_the_library_example_runs(tmp_path: Path) -> None:
    """The web-app example registers, publishes and announces its session against a dev relay."""
    script = tmp_path / "example.py"
    script.write_text(example("library"))
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['chat-1']"
    assert (tmp_path / "example-relay.db").exists()
