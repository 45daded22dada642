"""Acceptance tests of the `talaria-relay` command, run for real in subprocesses.

Every run is `python -m relay …` with its own XDG_STATE_HOME, so nothing touches the real home;
Postgres URLs reach the command only through its arguments. Exit codes are the documented ones
(relay/cli.py): 0 ok, 1 failed, 2 bad usage or input, 3 store or relay unreachable.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from backends import REAL, on
from cli_support import (
    IDENTITY_ALPHA,
    IDENTITY_BETA,
    LEGACY_FLOOR,
    LEGACY_NOW,
    ROOT,
    Result,
    child_env,
    cli,
    command,
    dev_relay,
    expect,
    files_of,
    free_port,
    home,
    json_url,
    pg_tables,
    populate,
    snapshot,
    sqlite_url,
    write_legacy_state,
)
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)
from harness import PUBLISHER_ID, RELAY_URL

from relay.store import ProfileGrant, StartedEntry, StartedScope, open_store
from relay.store.fleet import FleetMember
from relay.store.sql.migrate import head_revision

__all__ = ["home"]  # the fixture, imported for the tests below

SECRET = "s3cret-Pw-4c1f9e"  # noqa: S105 (a made-up password that must never be printed)
TRUNCATED_CONFIG = '{\n  "key_id": "key-1",\n  "private_key_path": "/x.pem",\n  "prof'
OK_LINE = "OK: the relay accepted and verified all"
STATUS_KEYS = {
    "version",
    "generated_at",
    "store",
    "level",
    "headline",
    "problems",
    "registration",
    "revision_floor",
    "profiles",
    "fleet",
}


async def create(url: str) -> None:
    """Open the store at `url` once, so that it exists (`status` does not create one)."""
    async with open_store(url):
        pass


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def fingerprint_of(pem: str) -> str:
    key = load_pem_private_key(pem.encode(), password=None)
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")


def assert_no_private_key(result: Result, pem: str) -> None:
    body = "".join(line for line in pem.splitlines() if "-----" not in line)
    assert "PRIVATE KEY" not in result.output, result.describe()
    assert body not in result.output.replace("\n", ""), result.describe()


def unreachable_pg_url() -> str:
    return f"postgresql://relay:{SECRET}@127.0.0.1:{free_port()}/relay"


# ── every subcommand ──────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("subcommand", "says"),
    [
        ("migrate", "the SQL store to migrate"),
        ("status", "the store to read, never written"),
        ("check", "the store to probe, never written"),
        ("rekey", "the store whose keys to rewrite"),
        ("grants", "the Postgres store whose database is named"),
    ],
)
def test_every_subcommand_on_a_store_has_help_with_its_own_store_option(
    home: Path, subcommand: str, says: str
) -> None:
    """`SUBCOMMAND --help` exits 0 and documents `--store URL` as that command uses it, with
    its environment default."""
    result = expect(cli(home, subcommand, "--help", timeout=30), 0)
    assert "--store URL" in result.stdout
    assert says in " ".join(result.stdout.split())
    assert "(default: $TALARIA_RELAY_STORE_URL, else the embedded SQLite file)" in " ".join(
        result.stdout.split()
    )


def test_demo_help_says_its_store_is_never_the_environments(home: Path) -> None:
    """`demo --help` says where the demo writes and never promises $TALARIA_RELAY_STORE_URL as
    its default, which it never uses."""
    text = " ".join(expect(cli(home, "demo", "--help", timeout=30), 0).stdout.split())
    assert "(default: $XDG_STATE_HOME/talaria-relay/demo.db" in text
    assert "default: $TALARIA_RELAY_STORE_URL" not in text


@pytest.mark.parametrize("subcommand", ["import", "dev-relay"])
def test_commands_without_a_store_take_no_store_option(home: Path, subcommand: str) -> None:
    """`import` (--from/--to) and `dev-relay` name no --store they would ignore."""
    assert "--store" not in expect(cli(home, subcommand, "--help", timeout=30), 0).stdout


def test_no_subcommand_is_a_usage_error(home: Path) -> None:
    """The bare command exits 2 and names the subcommands."""
    result = expect(cli(home, timeout=30), 2)
    assert "COMMAND" in result.stderr


@pytest.mark.sqlite
def test_store_defaults_to_the_environment_then_the_embedded_file(home: Path) -> None:
    """Without --store: $TALARIA_RELAY_STORE_URL, else `$XDG_STATE_HOME/talaria-relay/relay.db`."""
    chosen = home / "chosen.db"
    env = {"TALARIA_RELAY_STORE_URL": sqlite_url(chosen)}
    expect(cli(home, "migrate", env=env, timeout=30), 0)
    result = expect(cli(home, "status", env=env, timeout=30), 0)
    assert str(chosen) in result.stdout
    expect(cli(home, "migrate", timeout=30), 0)
    result = expect(cli(home, "status", timeout=30), 0)
    assert str(home / "talaria-relay" / "relay.db") in result.stdout


# ── migrate ───────────────────────────────────────────────────────────────────


@pytest.mark.sqlite
def test_migrate_sqlite_then_check_passes(home: Path) -> None:
    """`migrate` brings a new SQLite file to head (exit 0), and `migrate --check` then exits 0."""
    url = sqlite_url(home / "relay.db")
    result = expect(cli(home, "migrate", "--store", url, timeout=30), 0)
    assert f"at head {head_revision()}" in result.stdout
    result = expect(cli(home, "migrate", "--check", "--store", url, timeout=30), 0)
    assert f"at head {head_revision()}" in result.stdout


@pytest.mark.sqlite
def test_migrate_check_on_a_missing_sqlite_file_exits_1_and_creates_nothing(home: Path) -> None:
    """`migrate --check` on a SQLite file not yet created exits 1 and leaves no file behind."""
    path = home / "absent.db"
    result = expect(cli(home, "migrate", "--check", "--store", sqlite_url(path), timeout=30), 1)
    assert f"not at head {head_revision()}" in result.stdout
    assert not path.exists()


@pytest.mark.postgres
async def test_migrate_empty_postgres_then_check_passes(home: Path, pg_database: str) -> None:
    """`migrate` creates the schema in an empty Postgres database; `migrate --check` exits 0."""
    result = expect(cli(home, "migrate", "--store", pg_database, timeout=60), 0)
    assert f"at head {head_revision()}" in result.stdout
    expect(cli(home, "migrate", "--check", "--store", pg_database, timeout=30), 0)
    tables = await pg_tables(pg_database)
    assert {"relay_alembic_version", "relay_config"} <= set(tables)
    assert "alembic_version" not in tables  # the application's, never the relay's


@pytest.mark.postgres
async def test_migrate_check_on_empty_postgres_exits_1_and_changes_nothing(
    home: Path, pg_database: str
) -> None:
    """`migrate --check` on an empty database exits 1, says it is not at head, creates no table."""
    result = expect(cli(home, "migrate", "--check", "--store", pg_database, timeout=30), 1)
    assert "no revision" in result.stdout
    assert f"not at head {head_revision()}" in result.stdout
    assert await pg_tables(pg_database) == []


@pytest.mark.postgres
def test_two_migrates_at_once_on_postgres_both_succeed(home: Path, pg_database: str) -> None:
    """Two replicas running `migrate` on one empty database at the same moment both exit 0."""
    children = [
        subprocess.Popen(
            command("migrate", "--store", pg_database),
            cwd=ROOT,
            env=child_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [child.communicate(timeout=60) for child in children]
    assert [child.returncode for child in children] == [0, 0], outputs
    expect(cli(home, "migrate", "--check", "--store", pg_database, timeout=30), 0)


def test_migrate_sql_prints_postgres_ddl_without_a_server(home: Path) -> None:
    """`migrate --sql --from-empty` on a Postgres URL prints DDL and the advisory lock,
    connecting nowhere."""
    url = unreachable_pg_url()
    result = expect(cli(home, "migrate", "--sql", "--from-empty", "--store", url, timeout=30), 0)
    assert "CREATE TABLE relay_config" in result.stdout
    assert "pg_advisory_xact_lock" in result.stdout
    assert SECRET not in result.output


@pytest.mark.sqlite
def test_migrate_sql_prints_sqlite_ddl_and_creates_no_file(home: Path) -> None:
    """`migrate --sql` on a SQLite URL prints its DDL (no advisory lock) and creates no file."""
    path = home / "offline.db"
    result = expect(cli(home, "migrate", "--sql", "--store", sqlite_url(path), timeout=30), 0)
    assert "CREATE TABLE relay_config" in result.stdout
    assert "pg_advisory" not in result.stdout
    assert not path.exists()


@pytest.mark.parametrize(
    ("url", "name"),
    [
        pytest.param("json://{home}/state", "JSON", marks=pytest.mark.json),
        pytest.param("memory://", "memory", marks=pytest.mark.memory),
    ],
)
def test_migrate_a_store_without_a_schema_is_bad_input(home: Path, url: str, name: str) -> None:
    """`migrate` on a json:// or memory:// store exits 2 saying that store has no schema."""
    store = url.format(home=home)
    result = expect(cli(home, "migrate", "--store", store, timeout=30), 2)
    assert f"a {name} store has no schema to migrate" in result.stderr
    assert result.stderr.startswith("talaria-relay: ")


@pytest.mark.parametrize(
    "args",
    [
        ["migrate"],
        ["migrate", "--check"],
        ["status"],
        ["status", "--json"],
        ["demo"],
    ],
    ids=" ".join,
)
def test_unsupported_store_scheme_lists_the_supported_forms(home: Path, args: list[str]) -> None:
    """A store URL of an unknown scheme exits 2; the message lists every supported URL form."""
    result = expect(cli(home, *args, "--store", f"mysql://relay:{SECRET}@db/relay", timeout=30), 2)
    assert "unsupported store URL" in result.stderr
    for form in ("sqlite:///PATH", "postgresql://", "json:///STATE-DIR"):
        assert form in result.stderr, result.describe()
    assert SECRET not in result.output


def test_import_with_an_unsupported_scheme_is_bad_input(home: Path) -> None:
    """`import` from a store URL of an unknown scheme exits 2 and lists the supported forms."""
    result = expect(
        cli(
            home,
            "import",
            "--from",
            f"redis://relay:{SECRET}@cache/0",
            "--to",
            sqlite_url(home / "to.db"),
            timeout=30,
        ),
        2,
    )
    assert "sqlite:///PATH" in result.stderr
    assert SECRET not in result.output


@pytest.mark.postgres
@pytest.mark.parametrize(
    "args",
    [
        ["migrate", "--store", "{pg}"],
        ["migrate", "--check", "--store", "{pg}"],
        ["status", "--store", "{pg}"],
        ["status", "--json", "--store", "{pg}"],
        ["import", "--from", "{pg}", "--to", "{sqlite}"],
        ["import", "--from", "{sqlite}", "--to", "{pg}"],
    ],
    ids=[
        "migrate",
        "migrate-check",
        "status",
        "status-json",
        "import-from-postgres",
        "import-to-postgres",
    ],
)
def test_unreachable_postgres_exits_3_quickly_and_hides_the_password(
    home: Path, args: list[str]
) -> None:
    """A Postgres server that is not there: exit 3 within seconds, the password printed nowhere."""
    pg, sqlite = unreachable_pg_url(), sqlite_url(home / "local.db")
    asyncio.run(create(sqlite))  # a source that exists, so only the Postgres side fails
    result = expect(cli(home, *(a.format(pg=pg, sqlite=sqlite) for a in args), timeout=30), 3)
    assert result.seconds < 10, result.describe()
    assert SECRET not in result.output
    assert "unavailable" in result.stderr
    assert "relay:***@127.0.0.1" in result.stderr


# ── status ────────────────────────────────────────────────────────────────────


def test_status_of_a_fresh_store(home: Path, store_url: str, backend: str) -> None:
    """A fresh store's status: its backend, no registration, nothing held; text and --json."""
    asyncio.run(create(store_url))
    text = expect(cli(home, "status", "--store", store_url, timeout=30), 0)
    assert f"store        {backend}" in text.stdout
    assert "registration none" in text.stdout
    assert "revision     0" in text.stdout
    assert "verdict      Not publishing normally — 0 replicas live" in text.stdout
    assert "problem      not registered: pair this server with Talaria Relay" in text.stdout

    document = json.loads(expect(cli(home, "status", "--json", "--store", store_url), 0).stdout)
    assert set(document) == STATUS_KEYS
    assert document["store"]["backend"] == backend
    assert set(document["store"]) == {"backend", "url", "schema", "error"}
    if backend in ("json", "memory"):
        assert document["store"]["schema"] is None
    else:
        head = head_revision()
        schema = document["store"]["schema"]
        assert schema["current"] == schema["head"] == head
        assert (schema["at_head"], schema["ahead"], schema["compatible"]) == (True, False, True)
    assert document["registration"] is None
    assert document["profiles"] == []
    assert document["revision_floor"] == 0
    assert document["fleet"]["replicas"] == []
    assert document["level"] == "bad"
    assert document["problems"] == ["not registered: pair this server with Talaria Relay"]


@on(*REAL)
async def test_status_shows_each_live_replicas_clock_offset(home: Path, store_url: str) -> None:
    """Every live replica's offset, from its own fleet row, in the text and in --json; a row
    from before 0009 (no offset) says nothing of its clock."""
    now = int(time.time() * 1000)
    behind = FleetMember("web-1/aaaaaaaaaaaa", "1.0", "0009", "h1", 1, now, now, now + 60_000)
    async with open_store(store_url) as store:
        await store.record_member(replace(behind, clock_offset_ms=-2500, passes="of"))
        await store.record_member(replace(behind, owner="web-2/bbbbbbbbbbbb"))
    text = expect(cli(home, "status", "--store", store_url, timeout=30), 0).stdout
    (first, second) = [line for line in text.splitlines() if line.startswith("replica ")]
    assert "web-1, incarnation aaaaaaaaaaaa" in first
    assert "clock 2.5 s behind the store" in first
    assert "web-2, incarnation bbbbbbbbbbbb" in second
    assert "clock" not in second
    document = json.loads(expect(cli(home, "status", "--json", "--store", store_url), 0).stdout)
    rows = {row["owner"]: row for row in document["fleet"]["replicas"]}
    assert rows["web-1/aaaaaaaaaaaa"]["clock_offset_s"] == -2.5
    assert rows["web-2/bbbbbbbbbbbb"]["clock_offset_s"] is None
    # The clock's problem is the page's too: the same judgement.
    said = "replica web-1/aaaaaaaaaaaa's clock is 2.5 s behind the store: check its time sync (NTP)"
    assert said in document["problems"]


@on(*REAL)
async def test_status_of_a_registered_store(home: Path, store_url: str, backend: str) -> None:
    """A registered store's status shows every documented field, and never the private key."""
    async with open_store(store_url) as store:
        ids = await populate(store)
    state = await snapshot(store_url)
    registration = state["registration"]
    fingerprint = fingerprint_of(registration["pem"])
    unsent = {
        scope.profile_id: sum(not entry.sent for entry in scope.entries)
        for scope in state["started"]
    }
    assert unsent[ids["work_id"]] == 1

    result = expect(cli(home, "status", "--json", "--store", store_url, timeout=30), 0)
    assert_no_private_key(result, registration["pem"])
    document = json.loads(result.stdout)
    assert set(document) == STATUS_KEYS
    assert document["store"]["backend"] == backend
    assert isinstance(document["registration"].pop("generation"), int)
    assert document["registration"] == {
        "relay_url": RELAY_URL,
        "publisher_id": PUBLISHER_ID,
        "key_id": registration["key_id"],
        "key_fingerprint": fingerprint,
        "key_encrypted": False,
    }
    profiles = {profile["name"]: profile for profile in document["profiles"]}
    assert list(profiles) == ["default", "work"]
    for name in profiles:
        assert profiles[name]["profile_id"] == ids[f"{name}_id"]
        assert profiles[name]["identity_matches"] is profiles[name]["enrolled"] is True
    assert profiles["work"]["announcements_unsent"] == 1
    assert sum(p["outbox_depth"] for p in profiles.values()) == 2
    assert sum(p["presence_leases"] for p in profiles.values()) == 1
    assert document["revision_floor"] == state["revision_floor"]

    result = expect(cli(home, "status", "--store", store_url, timeout=30), 0)
    assert_no_private_key(result, registration["pem"])
    text = result.stdout
    for line in (
        f"relay        {RELAY_URL}",
        f"publisher    {PUBLISHER_ID}",
        f"key          {registration['key_id']}  {fingerprint}",
        f"profile      default → {ids['default_id']}  (identity ok)",
        f"profile      work → {ids['work_id']}  (identity ok)",
        f"revision     {state['revision_floor']}",
        "  queued     1 announcement(s) unsent, ",
    ):
        assert line in text, result.describe()


DOCS = Path(__file__).parents[2] / "docs" / "operating.md"
EXAMPLE_MARK = "<!-- the status --json example:"


def documented_status() -> dict[str, Any]:
    """The `status --json` example of docs/operating.md."""
    after = DOCS.read_text(encoding="utf-8").split(EXAMPLE_MARK, 1)[1]
    block = after.split("```json\n", 1)[1].split("```", 1)[0]
    found: dict[str, Any] = json.loads(block)
    return found


def shape_of(value: Any, path: str = "$") -> dict[str, str]:
    """Each leaf's JSON type by its path (a list by its first item); null is `null`."""
    if isinstance(value, dict):
        found: dict[str, str] = {path: "object"}
        for key, item in value.items():
            found.update(shape_of(item, f"{path}.{key}"))
        return found
    if isinstance(value, list):
        return {path: "array", **(shape_of(value[0], f"{path}[]") if value else {})}
    kinds = {bool: "boolean", int: "number", float: "number", str: "string"}
    return {path: "null" if value is None else kinds[type(value)]}


@on("sqlite", "postgres")
async def test_the_documented_status_json_is_what_status_prints(home: Path, store_url: str) -> None:
    """docs/operating.md's `status --json` example has every field `status --json` prints, of
    the same JSON type, and no other; its problem sentence is the one `status` writes for a
    replica backing off (but the numbers)."""
    async with open_store(store_url) as store:
        await populate(store)
        now = int(time.time() * 1000)
        await store.record_member(
            FleetMember(
                "web-1/3fa2c1d09b7e", "1.4.0", head_revision(), "web-1.internal", 4242, now,
                now, now + 60_000, pass_at=now, pass_outcome="backoff",  # noqa: S106
                backoff_until=now + 12_000, backoff_class="RelayHttpError 503",
                clock_offset_ms=12, passes="f",
            )
        )  # fmt: skip
    printed = json.loads(expect(cli(home, "status", "--json", "--store", store_url), 0).stdout)
    documented = documented_status()
    printed_shape, documented_shape = shape_of(printed), shape_of(documented)
    assert set(printed_shape) == set(documented_shape)
    for path, kind in printed_shape.items():
        # A value that may be null is shown with one, or as what it is when set.
        if "null" not in (kind, documented_shape[path]):
            assert kind == documented_shape[path], path
    (problem,) = [p for p in printed["problems"] if "web-1/3fa2c1d09b7e" in p]
    numbers = re.compile(r"\d+")
    assert numbers.sub("N", problem) == numbers.sub("N", documented["problems"][0])
    assert printed["version"] == documented["version"]


@pytest.mark.postgres
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
async def test_status_on_unmigrated_postgres_says_to_migrate(
    home: Path, pg_database: str, as_json: bool
) -> None:
    """`status` on an empty database exits 1, names `talaria-relay migrate`, creates no table."""
    flags = ["--json"] if as_json else []
    result = expect(cli(home, "status", *flags, "--store", pg_database, timeout=30), 1)
    assert f"talaria-relay migrate --store '{pg_database}'" in result.stderr
    if as_json:
        document = json.loads(result.stdout)
        schema = document["store"]["schema"]
        assert (schema["current"], schema["head"]) == (None, head_revision())
        assert (schema["at_head"], schema["ahead"], schema["compatible"]) == (False, False, False)
        assert f"--store '{pg_database}'" in document["hint"]
    else:
        assert f"schema       none (NOT at head {head_revision()})" in result.stdout
    assert await pg_tables(pg_database) == []


@pytest.mark.json
@pytest.mark.parametrize(
    "args",
    [["status"], ["status", "--json"], ["import", "--to", "{sqlite}"]],
    ids=lambda args: " ".join(a for a in args if not a.startswith("{")),
)
def test_corrupt_legacy_config_exits_1_clearly_and_is_left_alone(
    home: Path, args: list[str]
) -> None:
    """A truncated `talaria-relay.json`: exit 1, a message naming the file, the file untouched."""
    state = home / "state"
    state.mkdir()
    config = state / "talaria-relay.json"
    config.write_text(TRUNCATED_CONFIG)
    before = config.stat()
    store = ["--from", json_url(state)] if args[0] == "import" else ["--store", json_url(state)]
    concrete = [a.format(sqlite=sqlite_url(home / "to.db")) for a in args]
    result = expect(cli(home, *concrete[:1], *store, *concrete[1:], timeout=30), 1)
    assert config.read_text() == TRUNCATED_CONFIG
    assert config.stat().st_mtime_ns == before.st_mtime_ns
    assert "not valid JSON" in result.stderr
    assert "talaria-relay.json" in result.stderr, "the message should say which file is corrupt"


# ── import ────────────────────────────────────────────────────────────────────


def summary_lines(result: Result) -> dict[str, str]:
    """The import summary's `  name   value` lines by name."""
    lines: dict[str, str] = {}
    for line in result.stdout.splitlines()[1:]:
        name, _, value = line.strip().partition("  ")
        lines[name] = value.strip()
    return lines


@pytest.mark.json
@pytest.mark.sqlite
@pytest.mark.postgres
async def test_import_round_trip_json_sqlite_postgres_json_loses_nothing(
    home: Path, pg_database: str
) -> None:
    """json → sqlite → postgres → json keeps every record: config, key, identities, ledger, …"""
    source, sqlite, final = home / "source", home / "copy.db", home / "final"
    async with open_store(json_url(source)) as store:
        await populate(store)
    original = await snapshot(json_url(source))
    assert len(original["identities"]) == 3
    assert len(original["deleted"]) == 2
    assert {view.scope is None for view in original["deleted"]} == {True, False}
    assert len(original["presence"]) == 2

    first = expect(cli(home, "import", "--from", json_url(source), "--to", sqlite_url(sqlite)), 0)
    assert first.stdout.startswith(f"copied json://{source} → ")
    entries = sum(len(scope.entries) for scope in original["started"])
    assert summary_lines(first) == {
        "registration": "copied (2 profiles)",
        "identities": "3",
        "revision floor": str(original["revision_floor"]),
        "started ledger": f"{entries} entries in {len(original['started'])} scopes",
        "deleted outbox": "2",
        "presence leases": "2",
    }
    assert_no_private_key(first, original["registration"]["pem"])
    assert await snapshot(sqlite_url(sqlite)) == original

    expect(cli(home, "migrate", "--store", pg_database), 0)
    second = expect(cli(home, "import", "--from", sqlite_url(sqlite), "--to", pg_database), 0)
    assert_no_private_key(second, original["registration"]["pem"])
    assert await snapshot(pg_database) == original

    third = expect(cli(home, "import", "--from", pg_database, "--to", json_url(final)), 0)
    assert_no_private_key(third, original["registration"]["pem"])
    assert await snapshot(json_url(final)) == original

    statuses = [
        json.loads(expect(cli(home, "status", "--json", "--store", url), 0).stdout)
        for url in (json_url(source), json_url(final))
    ]
    for document in statuses:
        document.pop("store")
        document.pop("generated_at")
        # Run rows belong to the processes that wrote them: an import copies no replica.
        document.pop("fleet")
        document.pop("headline")
        # The target's registration was written anew: its generation is its own.
        document["registration"].pop("generation")
        for profile in document["profiles"]:
            # Ages are as of each read.
            profile.pop("announcements_oldest_age_s")
            profile.pop("outbox_oldest_age_s")
    assert statuses[0] == statuses[1]
    assert all(profile["identity_matches"] for profile in statuses[1]["profiles"])


@pytest.mark.sqlite
async def test_import_twice_changes_nothing(home: Path) -> None:
    """Running the same import again exits 0, reports the registration unchanged, alters nothing."""
    source, target = json_url(home / "source"), sqlite_url(home / "copy.db")
    async with open_store(source) as store:
        await populate(store)
    expect(cli(home, "import", "--from", source, "--to", target), 0)
    once = await snapshot(target)
    again = expect(cli(home, "import", "--from", source, "--to", target), 0)
    assert summary_lines(again)["registration"] == "unchanged (2 profiles)"
    assert await snapshot(target) == once == await snapshot(source)


@pytest.mark.sqlite
async def test_import_leaves_the_target_at_the_higher_revision_floor(home: Path) -> None:
    """The target's revision floor ends at max(source, target), whichever side is higher."""
    source = json_url(home / "source")
    async with open_store(source) as store:
        await populate(store)
        floor = await store.revision_floor()
    higher, lower = sqlite_url(home / "higher.db"), sqlite_url(home / "lower.db")
    async with open_store(higher) as store:
        await store.allocate_revisions(1, floor + 1_000_000)
    async with open_store(lower) as store:
        await store.allocate_revisions(1, 5)

    result = expect(cli(home, "import", "--from", source, "--to", higher), 0)
    assert summary_lines(result)["revision floor"] == str(floor + 1_000_000)
    assert (await snapshot(higher))["revision_floor"] == floor + 1_000_000
    expect(cli(home, "import", "--from", source, "--to", lower), 0)
    assert (await snapshot(lower))["revision_floor"] == floor
    assert (await snapshot(source))["revision_floor"] == floor


@pytest.mark.sqlite
async def test_import_refuses_a_different_registration_unless_forced(home: Path) -> None:
    """Over another registration: exit 1 and the target untouched; with --force it is replaced."""
    source, target = json_url(home / "source"), sqlite_url(home / "target.db")
    for url in (source, target):
        async with open_store(url) as store:
            await populate(store)
    before = await snapshot(target)
    wanted = await snapshot(source)
    assert before["registration"] != wanted["registration"]

    refused = expect(cli(home, "import", "--from", source, "--to", target), 1)
    assert "--force" in refused.stderr
    assert before["registration"]["key_id"] in refused.stderr
    assert await snapshot(target) == before

    forced = expect(cli(home, "import", "--from", source, "--to", target, "--force"), 0)
    assert summary_lines(forced)["registration"] == "copied (2 profiles)"
    after = await snapshot(target)
    assert after["registration"] == wanted["registration"]
    assert after["identities"] == wanted["identities"]
    assert after["revision_floor"] == max(before["revision_floor"], wanted["revision_floor"])


@pytest.mark.sqlite
async def test_import_refuses_other_profile_identities_unless_forced(home: Path) -> None:
    """A target holding another identity for a profile: exit 1 naming it; --force replaces it."""
    source, target = json_url(home / "source"), sqlite_url(home / "target.db")
    async with open_store(source) as store:
        await populate(store)
    async with open_store(target) as store:
        theirs = await store.profile_identity("default")
    ours = (await snapshot(source))["identities"]["default"]

    refused = expect(cli(home, "import", "--from", source, "--to", target), 1)
    assert "default" in refused.stderr
    assert "--force" in refused.stderr
    after = await snapshot(target)
    assert after["identities"] == {"default": theirs}
    assert after["registration"] is None

    expect(cli(home, "import", "--from", source, "--to", target, "--force"), 0)
    assert (await snapshot(target))["identities"]["default"] == ours


@pytest.mark.parametrize("kind", ["sqlite", "json"])
async def test_import_dry_run_writes_nothing_to_an_existing_store(home: Path, kind: str) -> None:
    """`--dry-run` reports what it would copy and leaves an existing target exactly as it was."""
    source = json_url(home / "source")
    async with open_store(source) as store:
        await populate(store)
    target = sqlite_url(home / "target.db") if kind == "sqlite" else json_url(home / "target")
    async with open_store(target) as store:
        await store.allocate_revisions(1, 42)
    before = await snapshot(target)
    files = files_of(home / "target") if kind == "json" else None

    result = expect(cli(home, "import", "--from", source, "--to", target, "--dry-run"), 0)
    assert result.stdout.startswith("would copy ")
    assert summary_lines(result)["registration"] == "copied (2 profiles)"
    assert await snapshot(target) == before
    if files is not None:
        assert files_of(home / "target") == files


@pytest.mark.parametrize("kind", ["sqlite", "json"])
async def test_import_dry_run_creates_no_target(home: Path, kind: str) -> None:
    """`--dry-run` into a store that does not exist yet leaves no file or directory behind."""
    source = json_url(home / "source")
    async with open_store(source) as store:
        await populate(store)
    path = home / ("target.db" if kind == "sqlite" else "target")
    target = sqlite_url(path) if kind == "sqlite" else json_url(path)

    result = expect(cli(home, "import", "--from", source, "--to", target, "--dry-run"), 0)
    assert result.stdout.startswith("would copy ")
    assert not path.exists(), f"--dry-run created {path}"


@pytest.mark.json
@pytest.mark.sqlite
@pytest.mark.parametrize("how", ["profile-home", "profiles-root"])
async def test_import_legacy_state_dir_with_its_identities(home: Path, how: str) -> None:
    """A state dir written by the Python original imports with the identities of its homes."""
    state, root = home / "legacy-state", home / "profiles"
    homes = {"alpha": root / "alpha", "beta": root / "beta"}
    pem = write_legacy_state(state, homes)
    before = files_of(state, root)
    if how == "profile-home":
        located = [f"--profile-home=alpha={homes['alpha']}", f"--profile-home=beta={homes['beta']}"]
    else:
        located = ["--profiles-root", str(root)]
    target = sqlite_url(home / "imported.db")

    result = expect(cli(home, "import", "--from", json_url(state), "--to", target, *located), 0)
    assert summary_lines(result) == {
        "registration": "copied (2 profiles)",
        "identities": "2",
        "revision floor": str(LEGACY_FLOOR),
        "started ledger": "3 entries in 2 scopes",
        "deleted outbox": "0",
        "presence leases": "0",
    }
    assert files_of(state, root) == before, "import wrote to its source"

    copied = await snapshot(target)
    assert copied["registration"] == {
        "url": "https://relay.example",
        "publisher_id": "https://hermes.example",
        "key_id": "key-legacy",
        "profiles": {
            "alpha": ProfileGrant(IDENTITY_ALPHA, "prf_alpha"),
            "beta": ProfileGrant(IDENTITY_BETA, "prf_beta"),
        },
        "pem": pem,
    }
    assert copied["identities"] == {"alpha": IDENTITY_ALPHA, "beta": IDENTITY_BETA}
    assert copied["revision_floor"] == LEGACY_FLOOR
    assert copied["started"] == [
        StartedScope(
            "prf_alpha",
            LEGACY_NOW - 5000,
            (
                StartedEntry("prf_alpha", "earlier", LEGACY_NOW - 2000, sent=True),
                StartedEntry("prf_alpha", "later", LEGACY_NOW - 1000),
            ),
        ),
        StartedScope(
            "prf_beta",
            LEGACY_NOW - 4000,
            (StartedEntry("prf_beta", "beta-one", LEGACY_NOW, sent=True),),
        ),
    ]
    status = json.loads(expect(cli(home, "status", "--json", "--store", target), 0).stdout)
    assert [(p["name"], p["profile_id"], p["identity_matches"]) for p in status["profiles"]] == [
        ("alpha", "prf_alpha", True),
        ("beta", "prf_beta", True),
    ]


@pytest.mark.parametrize(
    "extra",
    [["--profile-home", "alpha"], ["--profile-home", "=/tmp"], ["--profile-home", "alpha="]],
    ids=["no-equals", "no-name", "no-path"],
)
def test_import_malformed_profile_home_is_bad_input(home: Path, extra: list[str]) -> None:
    """`--profile-home` without NAME=PATH exits 2 and says the form it takes."""
    args = ["--from", json_url(home / "s"), "--to", sqlite_url(home / "t.db")]
    result = expect(cli(home, "import", *args, *extra, timeout=30), 2)
    assert "NAME=PATH" in result.stderr


def test_import_into_the_same_store_is_bad_input(home: Path) -> None:
    """`import` whose --from and --to name one store exits 2."""
    url = sqlite_url(home / "same.db")
    result = expect(cli(home, "import", "--from", url, "--to", url, timeout=30), 2)
    assert "same store" in result.stderr


# ── dev-relay ─────────────────────────────────────────────────────────────────


def test_dev_relay_serves_over_http_and_stops_on_sigterm(home: Path) -> None:
    """`dev-relay --port 0` prints its URL and an invitation, answers HTTP, exits 0 on SIGTERM."""
    with dev_relay(home) as relay:
        assert relay.url.startswith("http://127.0.0.1:")
        assert not relay.url.endswith(":0")
        assert len(relay.invitation) >= 16
        assert any("listening on" in line for line in relay.startup)
        state = httpx.get(f"{relay.url}/admin/state", timeout=10)
        assert state.status_code == 200
        assert set(state.json()) == {"publishers", "keys", "grants", "viewed", "started"}
        minted = httpx.post(f"{relay.url}/admin/invitations", json={"userId": "u"}, timeout=10)
        assert minted.status_code == 201
        code, out, err = relay.stop()
    assert code == 0, (out, err)
    assert "dev relay stopped" in out
    assert "Traceback" not in err


def test_dev_relay_refuses_a_non_loopback_host(home: Path) -> None:
    """`dev-relay --host 0.0.0.0` exits 2: the unauthenticated admin API stays on loopback."""
    result = expect(cli(home, "dev-relay", "--host", "0.0.0.0", "--port", "0", timeout=30), 2)  # noqa: S104
    assert "loopback" in result.stderr


# ── demo ──────────────────────────────────────────────────────────────────────


@pytest.mark.sqlite
def test_demo_on_the_default_sqlite_store(home: Path) -> None:
    """`demo` with no store exits 0 on its SQLite file under XDG_STATE_HOME, and again after;
    the store it shows lists its replicas (an incarnation stopped within the hour stays listed,
    as on the page), none alive: the demo ended its turns and stopped before showing it."""
    for _ in range(2):
        result = expect(cli(home, "demo"), 0)
        assert last_line(result.stdout).startswith(OK_LINE), result.describe()
        assert "PRIVATE KEY" not in result.output
        listed = [line for line in result.stdout.splitlines() if line.startswith("replica ")]
        assert listed, result.describe()
        assert all(", lease ended" in line for line in listed), listed
    assert (home / "talaria-relay" / "demo.db").exists()
    assert not (home / "talaria-relay" / "relay.db").exists(), "the demo touched the real store"


@pytest.mark.postgres
def test_demo_on_a_fresh_postgres_database(home: Path, pg_database: str) -> None:
    """`demo --store` on an empty Postgres database migrates it and exits 0."""
    result = expect(cli(home, "demo", "--store", pg_database), 0)
    assert last_line(result.stdout).startswith(OK_LINE), result.describe()
    expect(cli(home, "migrate", "--check", "--store", pg_database, timeout=30), 0)


@pytest.mark.postgres
def test_demo_with_two_replicas_on_postgres(home: Path, pg_database: str) -> None:
    """`demo --replicas 2` on Postgres: both replica processes publish and everything exits 0."""
    result = expect(cli(home, "demo", "--replicas", "2", "--store", pg_database, timeout=120), 0)
    assert "replicas exited with [0, 0]" in result.stdout
    assert last_line(result.stdout).startswith(OK_LINE), result.describe()


@pytest.mark.sqlite
def test_demo_against_a_running_dev_relay(home: Path) -> None:
    """`demo --relay-url --invitation …` registers and enrolls on a running relay, exits 0."""
    with dev_relay(home) as relay:
        minted = httpx.post(
            f"{relay.url}/admin/invitations", json={"userId": "usr_work"}, timeout=10
        )
        assert minted.status_code == 201
        result = cli(
            home,
            "demo",
            "--store",
            sqlite_url(home / "demo.db"),
            "--relay-url",
            relay.url,
            # `=`: a token may start with "-" (see the test after this one).
            f"--invitation={relay.invitation}",
            f"--invitation={minted.json()['invitation']}",
            "--allow-insecure-loopback",
        )
        held = httpx.get(f"{relay.url}/admin/state", timeout=10).json()
        code, _, err = relay.stop()
    expect(result, 0)
    assert last_line(result.stdout).startswith(OK_LINE), result.describe()
    assert [p["publisherId"] for p in held["publishers"]] == ["http://hermes-demo.localhost"]
    assert len(held["grants"]) == 2
    assert "usr_work" in {grant["userId"] for grant in held["grants"]}
    announced = sorted(event["sessionId"] for event in held["started"])
    assert announced == ["chat-old", "chat-plan", "chat-review"]
    assert code == 0, err


def test_demo_takes_an_invitation_token_that_starts_with_a_dash(home: Path) -> None:
    """A base64url token starting with "-" is taken as written after `--invitation TOKEN`."""
    with dev_relay(home) as relay:
        tokens = []
        # One client for every mint: about one token in 64 starts with "-".
        with httpx.Client(timeout=10) as http:
            for _ in range(2000):
                minted = http.post(f"{relay.url}/admin/invitations", json={"userId": "u"})
                tokens.append(minted.json()["invitation"])
                if tokens[-1].startswith("-"):
                    break
        assert tokens[-1].startswith("-"), "the dev relay minted no token starting with '-'"
        result = cli(
            home,
            "demo",
            "--store",
            sqlite_url(home / "demo.db"),
            "--relay-url",
            relay.url,
            "--invitation",
            tokens[-1],
            "--allow-insecure-loopback",
        )
        relay.stop()
    expect(result, 0)
    assert last_line(result.stdout).startswith(OK_LINE), result.describe()


def test_demo_with_a_bad_invitation_exits_1_with_the_rejection(home: Path) -> None:
    """An invitation the relay does not know: exit 1, the refusal's own status (409), and the
    relay's answer (400 and its reason) told apart from it, with what to do."""
    with dev_relay(home) as relay:
        result = cli(
            home,
            "demo",
            "--store",
            sqlite_url(home / "demo.db"),
            "--relay-url",
            relay.url,
            "--invitation",
            "not-a-real-invitation",
            "--allow-insecure-loopback",
        )
        relay.stop()
    expect(result, 1)
    assert (
        "pairing refused with 409: Talaria Relay rejected server registration (the relay "
        "answered HTTP 400 invalid_invitation: the relay does not know this invitation: ask for "
        "a new one)" in result.stderr
    )
    assert "(HTTP 400)" not in result.stderr
    assert "not-a-real-invitation" not in result.output, "the invitation was printed"


def demo_unreachable(home: Path) -> Result:
    return cli(
        home,
        "demo",
        "--store",
        sqlite_url(home / "demo.db"),
        "--relay-url",
        f"http://127.0.0.1:{free_port()}",
        "--invitation",
        "an-invitation",
        "--allow-insecure-loopback",
    )


def test_demo_against_an_unreachable_relay_says_so(home: Path) -> None:
    """A relay URL nothing listens on: a non-zero exit and "Could not reach Talaria Relay"."""
    result = demo_unreachable(home)
    assert result.code != 0, result.describe()
    assert "Could not reach Talaria Relay" in result.stderr


def test_demo_against_an_unreachable_relay_exits_3(home: Path) -> None:
    """An unreachable relay exits 3, the code relay/cli.py documents for "relay unreachable"."""
    expect(demo_unreachable(home), 3)


@pytest.mark.parametrize(
    "args",
    [["--invitation", "x"], ["--relay-url", "http://127.0.0.1:9"], ["--replicas", "-1"]],
    ids=["invitation-without-url", "url-without-invitation", "negative-replicas"],
)
def test_demo_usage_errors_exit_2(home: Path, args: list[str]) -> None:
    """Inconsistent demo options exit 2 with a message, before touching any store or relay."""
    result = expect(cli(home, "demo", *args, timeout=30), 2)
    assert result.stderr.startswith("talaria-relay: ")
    assert not (home / "talaria-relay").exists()
