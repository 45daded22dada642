"""README.md's library example runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


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


# Drives the FastAPI example's app through its lifespan, as a browser and a load balancer would.
FASTAPI_DRIVER = """
from starlette.testclient import TestClient

OWNER = {"authorization": "Bearer owner-token"}
with TestClient(app) as client:
    beat = {"tab_id": "tab-00001", "active": True, "seq": 1}
    print(client.get("/api/talaria/relay/health").json())
    print(client.post("/api/talaria/presence", json=beat, headers=OWNER).json())
    print(client.post("/api/talaria/presence", json=beat).status_code)
    print(client.post("/api/talaria/viewed", json={"session_id": "chat-1"}, headers=OWNER).json())
print(client.get("/api/talaria/relay/health").status_code)
"""


def test_the_fastapi_example_serves_the_routes(tmp_path: Path) -> None:
    """The FastAPI example starts its service in its lifespan and answers the relay routes."""
    script = tmp_path / "fastapi_example.py"
    script.write_text(example("fastapi") + FASTAPI_DRIVER)
    store_url = f"sqlite:///{tmp_path / 'relay.db'}"
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "TALARIA_RELAY_STORE_URL": store_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "{'ok': True}",
        "{'ok': True, 'lease_seconds': 90}",
        "401",
        "{'ok': True}",
        "503",
    ]
