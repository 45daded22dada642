"""Every Python sample of README.md and the manual (docs/) is tagged, and every runnable one runs.

A ```python block follows one of two tags on the line before it:

    <!-- example: NAME -->      run as a script of its own (in an empty folder), must exit 0;
                                DRIVERS appends code that exercises it, EXPECTED checks its output
    <!-- not-run: WHY -->       a fragment, compiled only (WHY says why it cannot run alone)

An untagged block fails `test_every_python_sample_is_tagged`, so no untested sample slips in.
"""

from __future__ import annotations

import ast
import asyncio
import re
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import forked
import pytest
from cli_support import child_env

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 300
FENCE = re.compile(r"^( *)```(?:python|py|python3)\b[^\n]*\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
TAG = re.compile(r"<!-- (example|not-run): *(.*?) *-->\s*$")


@dataclass(frozen=True, slots=True)
class Sample:
    """One ```python block: where it is, its tag, and its code (dedented)."""

    source: Path
    line: int
    kind: str | None  # "example", "not-run", or None when untagged
    label: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}"


def sources() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def samples_of(path: Path) -> list[Sample]:
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        tag = TAG.search(before)
        found.append(
            Sample(
                source=path,
                line=text.count("\n", 0, match.start()) + 1,
                kind=tag.group(1) if tag else None,
                label=tag.group(2) if tag else "",
                code=textwrap.dedent(match.group(2)),
            )
        )
    return found


SAMPLES = [sample for path in sources() for sample in samples_of(path)]
EXAMPLES = {sample.label: sample for sample in SAMPLES if sample.kind == "example"}


def run_script(
    code: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `code` as a script in `cwd`, in a process of its own (forked: no interpreter start)."""
    script = cwd / "sample.py"
    script.write_text(code)
    env = child_env(cwd / "state", **(env or {}))
    return asyncio.run(forked.run(str(script), env=env, cwd=cwd, within_s=90))


def test_every_python_sample_is_tagged() -> None:
    """Each ```python block of the README and the manual says whether the tests run it."""
    untagged = [sample.where for sample in SAMPLES if sample.kind is None]
    assert not untagged, f"tag these <!-- example: NAME --> or <!-- not-run: WHY -->: {untagged}"
    assert len(SAMPLES) > 2


def test_example_names_are_unique_and_reasons_given() -> None:
    """An example's name finds one block; a fragment says why it is not run."""
    names = [sample.label for sample in SAMPLES if sample.kind == "example"]
    assert sorted(names) == sorted(set(names)), names
    assert all(re.fullmatch(r"[\w-]+", name) for name in names), names
    assert all(sample.label for sample in SAMPLES if sample.kind == "not-run")
    named = set(DRIVERS) | set(EXPECTED) | set(CONTAINS)
    assert named <= set(names), f"no example named {named - set(names)}"


@pytest.mark.parametrize(
    "sample", [s for s in SAMPLES if s.kind == "not-run"], ids=lambda s: s.where
)
def test_a_fragment_is_valid_python(sample: Sample) -> None:
    """A fragment the tests cannot run still parses (top-level await allowed); a copy of a
    file the tests run elsewhere is that file, as it is now (pages read on GitHub too, where an
    include would show as its directive)."""
    if (copy := re.match(r"a copy of (examples/[\w/]+\.py)\b", sample.label)) is not None:
        assert sample.code == (ROOT / copy.group(1)).read_text(), f"{sample.where}: stale copy"
        return
    compile(
        sample.code, sample.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )


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

# Sends the aiohttp example's routes a browser's requests through aiohttp's test client.
AIOHTTP_DRIVER = """
import asyncio

from aiohttp.test_utils import TestClient, TestServer


async def drive() -> None:
    owner = {"Authorization": "Bearer owner-token"}
    beat = {"tab_id": "tab-00001", "active": True, "seq": 1}
    async with TestClient(TestServer(make_app())) as client:
        for method, path, body, headers in [
            ("GET", "/api/talaria/relay/health", None, {}),
            ("POST", "/api/talaria/presence", beat, owner),
            ("POST", "/api/talaria/presence", beat, {}),
            ("POST", "/api/talaria/relay/pair", {}, owner),
            ("POST", "/api/talaria/viewed", {"session_id": 7}, owner),
            ("POST", "/api/talaria/viewed", {"session_id": "chat-1"}, owner),
        ]:
            answer = await client.request(method, path, json=body, headers=headers)
            print(answer.status, await answer.json())


asyncio.run(drive())
"""

# Sends the Django example's views a browser's requests through Django's async test client.
DJANGO_DRIVER = """
from django.test import AsyncClient


async def drive() -> None:
    client, owner = AsyncClient(), {"Authorization": "Bearer owner-token"}
    beat = {"tab_id": "tab-00001", "active": True, "seq": 1}
    for path, body in [
        ("/api/talaria/presence", beat),
        ("/api/talaria/relay/pair", {}),
        ("/api/talaria/viewed", {"session_id": "chat-1"}),
    ]:
        answer = await client.post(path, body, content_type="application/json", headers=owner)
        print(answer.status_code, answer.json())
    print((await AsyncClient().post("/api/talaria/presence", beat)).status_code)
    await (await relay_service()).stop()
    await (await relay_service()).store.close()


asyncio.run(drive())
"""

DRIVERS: dict[str, str] = {
    "fastapi": FASTAPI_DRIVER,
    "aiohttp": AIOHTTP_DRIVER,
    "django": DJANGO_DRIVER,
}

EXPECTED: dict[str, list[str]] = {
    "quickstart": ["['chat-1']"],
    "quickstart-manual": ["['chat-1']"],
    "store": ["True 3"],
    "health": ["False True False None"],
    "wsgi": ["{'ok': True, 'lease_seconds': 90}", "401"],
    "synchost": ["False", "{'ok': True, 'lease_seconds': 90}", "False"],
    "aiohttp": [
        "200 {'ok': True}",
        "200 {'ok': True, 'lease_seconds': 90}",
        "401 {'error': 'Not authorized.'}",
        "400 {'error': 'Missing relay pairing fields'}",
        "400 {'error': 'Invalid session_id'}",
        "200 {'ok': True}",
    ],
    "django": [
        "200 {'ok': True, 'lease_seconds': 90}",
        "400 {'error': 'Missing relay pairing fields'}",
        "200 {'ok': True}",
        "401",
    ],
    "fastapi": [
        "{'ok': True}",
        "{'ok': True, 'lease_seconds': 90}",
        "401",
        "{'ok': True}",
        "503",
    ],
}


# Lines an example's output must hold, where the rest varies (times, optional instruments).
CONTAINS: dict[str, list[str]] = {
    "prometheus": [
        "relay_snapshots_total",
        "relay_pass_duration_seconds_count",
        "relay_store_transaction_duration_seconds_count",
        "relay_backoff_active",
    ],
    "json-logs": [
        '"level": "INFO", "logger": "relay.publisher"',
        '"relay_event": "snapshot_recovered"',
    ],
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_example_runs(name: str, tmp_path: Path) -> None:
    """The example runs as it stands (plus its driver) and prints what the manual says."""
    sample = EXAMPLES[name]
    store_url = f"sqlite:///{tmp_path / 'relay.db'}"
    result = run_script(
        sample.code + DRIVERS.get(name, ""), tmp_path, {"TALARIA_RELAY_STORE_URL": store_url}
    )
    assert result.returncode == 0, f"{sample.where}\n{result.stderr}"
    if name in EXPECTED:
        assert result.stdout.splitlines() == EXPECTED[name], sample.where
    for text in CONTAINS.get(name, []):
        assert text in result.stdout, f"{sample.where}: {text!r} not in\n{result.stdout}"


def test_the_manual_shows_the_readmes_quick_start() -> None:
    """Getting started shows the README's quick start word for word, so the two never drift."""
    assert EXAMPLES["quickstart-manual"].code == EXAMPLES["quickstart"].code


def test_the_quick_start_writes_its_store_in_the_working_folder(tmp_path: Path) -> None:
    """The README's quick start leaves its SQLite file where it was run, as it says."""
    result = run_script(EXAMPLES["quickstart"].code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "example-relay.db").exists()


def test_the_quick_start_runs_twice_in_one_folder(tmp_path: Path) -> None:
    """The README's quick start runs again in the same folder, over the store the first run left."""
    for _ in range(2):
        result = run_script(EXAMPLES["quickstart"].code, tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["['chat-1']"]


def test_the_readme_reads_in_five_minutes() -> None:
    """The README stays short: the rest belongs in the manual."""
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move some into docs/"


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs and GitHub both make it for plain headings."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = page.read_text()
    found = {slug(m.group(1)) for m in re.finditer(r"^#+ (.*?)(?: \{#[\w-]+\})?$", text, re.M)}
    return found | set(re.findall(r"\{#([\w-]+)\}", text))


def test_the_readmes_links_reach_the_manual() -> None:
    """Every link of the README into docs/ names a page that exists, and a heading on it."""
    broken = []
    for target in re.findall(r"\]\((docs/[^)\s]+)\)", README.read_text()):
        path, _, anchor = target.partition("#")
        page = ROOT / path
        if not page.is_file() or (anchor and anchor not in anchors(page)):
            broken.append(target)
    assert not broken, broken
