"""Secrets never leave: no private key, key passphrase, invitation, signature or database password
in any output or log record, and requests go only where they should, signed over what is sent.

Covered here: the demo in this process (every logger at DEBUG) and as the real command, the
command's error paths, the relay origin check, the signature. The relay and network faults are
covered by tests/publisher/test_relay_faults.py, test_relay_answers.py and
test_network_faults.py, which run every case under the same `no_secret_leaks` fixture.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from backends import REAL, on
from cli_support import (
    ROOT,
    RUN_TIMEOUT_S,
    Result,
    child_env,
    command,
    free_port,
    populate,
    run,
    write_legacy_state,
)
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import event, example, given
from hypothesis import strategies as st
from secrets_support import DB_PASSWORD, PASSPHRASE, SecretWatch, verify
from sqlalchemy import make_url
from strategies import origins

from relay.cli import demo
from relay.client import RelayClient
from relay.errors import InvalidInputError, RelayPairingError
from relay.protocol import session_path, snapshot_path, validated_origin
from relay.service import RelayService
from relay.store import open_store
from relay.store.keys.keyring import PASSPHRASE_ENV
from relay.testing import DevRelay, MemoryHost, serve

INVITATION = "inv-AbC123_never-printed-4d9e"


async def stored_pem(url: str) -> str:
    """The registration's key, opened (with this process's passphrase, if it is encrypted)."""
    async with open_store(url) as store:
        config = await store.load_config()
        assert config is not None
        return await store.load_key(config.key_ref)


def with_password(url: str) -> str:
    """`url` with a database password; a trust-auth test server ignores it, so it still works."""
    return make_url(url).set(password=DB_PASSWORD).render_as_string(hide_password=False)


# ── the demo ─────────────────────────────────────────────────────────────────


@pytest.mark.sqlite
async def test_the_demo_says_and_logs_no_secret(
    no_secret_leaks: SecretWatch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole demo in this process, every logger at DEBUG: what it says, what it logs and the
    errors it makes hold none of the keys, invitations and signatures it used, nor a passphrase."""
    watch = no_secret_leaks
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    watch.add("passphrase", {PASSPHRASE})
    said: list[str] = []
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    assert await demo.run(url, say=said.append), "\n".join(said)
    watch.add_pem(await stored_pem(url))
    assert watch.kinds["invitation"] == 2
    assert watch.kinds["signature"] > 10
    watch.assert_clean("\n".join(said), where="demo's output")


@on(*REAL)  # its replica process shares the store
async def test_the_demo_command_prints_no_secret(
    backend: str, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`talaria-relay demo` against a dev relay, on every backend (Postgres with a password),
    with a replica process too: neither its stdout nor its stderr holds the stored key, an
    invitation, a signature the relay received, the database password or the passphrase."""
    relay = DevRelay()
    url = with_password(store_url) if backend == "postgres" else store_url
    async with serve(relay) as relay_url:
        invitations = [relay.mint_invitation("usr_owner"), relay.mint_invitation("usr_work")]
        args = ["demo", "--store", url, "--relay-url", relay_url, "--allow-insecure-loopback"]
        args += [f"--invitation={token}" for token in invitations]
        args += ["--replicas", "1"]
        child = await asyncio.create_subprocess_exec(
            *command(*args),
            cwd=ROOT,
            env=child_env(tmp_path / "xdg", **{PASSPHRASE_ENV: PASSPHRASE}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(child.communicate(), RUN_TIMEOUT_S * 2)
    output = out.decode() + err.decode()
    assert child.returncode == 0, output
    assert "OK: the relay accepted and verified all" in output
    watch = SecretWatch()
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)  # the demo stored its key under it
    watch.add_pem(await stored_pem(url))
    watch.add("invitation", invitations)
    for request in relay.requests:
        if "x-talaria-signature" in request.headers:
            watch.add_signature(request.headers["x-talaria-signature"])
    watch.add_password(DB_PASSWORD)
    watch.add("passphrase", {PASSPHRASE})
    assert watch.kinds["signature"] > 10
    watch.assert_clean(output, where="demo's output")


# ── the command's error paths ────────────────────────────────────────────────


@dataclass(frozen=True)
class States:
    """Stores holding registrations (so a key to leak), whole or damaged, and their keys."""

    registered: str  # SQLite, registered, with every kind of record
    other: str  # SQLite, registered elsewhere: importing one into the other conflicts
    legacy: str  # the Python original's JSON state dir
    bad_key: str  # a JSON state dir whose key file no longer parses
    bad_config: str  # a JSON state dir whose registration is cut short
    not_sqlite: str  # a file that is not a database
    pems: tuple[str, ...]


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> States:
    root = tmp_path_factory.mktemp("states")

    async def registered(path: Path) -> tuple[str, str]:
        url = f"sqlite:///{path}"
        async with open_store(url) as store:
            await populate(store)
        return url, await stored_pem(url)

    registered_url, registered_pem = asyncio.run(registered(root / "registered.db"))
    other_url, other_pem = asyncio.run(registered(root / "other.db"))
    legacy_pem = write_legacy_state(root / "legacy", {})
    pems: tuple[str, ...] = (registered_pem, other_pem, legacy_pem)

    bad_key = root / "bad-key"
    write_legacy_state(bad_key, {})
    (key_file,) = bad_key.glob("*.pem")
    pem = key_file.read_text()
    pems += (pem,)
    # Still the whole key, with a stray character in its body: unreadable, and not to be echoed.
    key_file.write_text(pem.replace("\n-----END", "!\n-----END"))

    bad_config = root / "bad-config"
    pems += (write_legacy_state(bad_config, {}),)
    (bad_config / "talaria-relay.json").write_text('{"key_id": "key-1", "private_key_path": "/x')

    not_sqlite = root / "not-sqlite.db"
    not_sqlite.write_bytes(b"not a database, whatever it says\n" * 64)
    return States(
        registered_url,
        other_url,
        f"json://{root / 'legacy'}",
        f"json://{bad_key}",
        f"json://{bad_config}",
        f"sqlite:///{not_sqlite}",
        pems,
    )


def pg_url(database: str = "relay", port: int = 5432, query: str = "") -> str:
    """A Postgres URL with a password on loopback (no server needed to refuse it)."""
    return f"postgresql://relay:{DB_PASSWORD}@127.0.0.1:{port}/{database}{query}"


# Each case: the arguments ({placeholders} filled in from `States` and below), the exit code.
ERROR_PATHS: dict[str, tuple[list[str], int]] = {
    "status-registered": (["status", "--store", "{registered}"], 0),
    "status-json-registered": (["status", "--json", "--store", "{registered}"], 0),
    "status-legacy": (["status", "--store", "{legacy}"], 0),
    "import-legacy": (
        ["import", "--allow-missing-identities", "--from", "{legacy}", "--to", "{fresh}"],
        0,
    ),
    "import-legacy-without-identities": (["import", "--from", "{legacy}", "--to", "{fresh}"], 2),
    "import-dry-run": (["import", "--dry-run", "--from", "{registered}", "--to", "{fresh}"], 0),
    "import-conflict": (["import", "--from", "{registered}", "--to", "{other}"], 1),
    "status-unreadable-key": (["status", "--store", "{bad_key}"], 0),
    "import-unreadable-key": (
        ["import", "--allow-missing-identities", "--from", "{bad_key}", "--to", "{fresh}"],
        1,
    ),
    "status-cut-config": (["status", "--store", "{bad_config}"], 1),
    "status-not-sqlite": (["status", "--store", "{not_sqlite}"], 3),
    "migrate-not-sqlite": (["migrate", "--store", "{not_sqlite}"], 3),
    "migrate-check-not-sqlite": (["migrate", "--check", "--store", "{not_sqlite}"], 3),
    "rekey-unset-variable": (
        ["rekey", "--store", "{registered}", "--to-passphrase-env", "UNSET_PASSPHRASE_VARIABLE"],
        2,
    ),
    "rekey-missing-store": (["rekey", "--store", "{fresh}", "--decrypt"], 2),
    "rekey-not-sqlite": (["rekey", "--store", "{not_sqlite}", "--decrypt"], 1),
    "demo-on-a-registered-store": (
        ["demo", "--store", "{registered}", "--relay-url", "{nowhere}", "--invitation", "{token}"],
        2,
    ),
    "demo-unreachable-relay": (
        ["demo", "--store", "{fresh}", "--relay-url", "{nowhere}", "--invitation", "{token}"],
        3,
    ),
    "demo-relay-with-credentials": (
        [
            "demo",
            "--store",
            "{fresh}",
            "--relay-url",
            "http://relay:{password}@127.0.0.1:9",
            "--mint-invitations",
        ],
        2,
    ),
    "demo-invitation-without-relay": (["demo", "--invitation", "{token}"], 2),
    "misplaced-store-url": (["status", "{pg_unreachable}"], 2),
    "misplaced-invitation": (["status", "--invitation", "{token}"], 2),
    "unknown-command-with-url": (["stat", "--store", "{pg_unreachable}"], 2),
    "postgres-bad-port": (["status", "--store", pg_url(port=99999)], 2),
    "postgres-unknown-parameter": (["status", "--store", pg_url(query="?password=x")], 2),
    "postgres-no-database": (["migrate", "--store", pg_url(database="")], 2),
    "postgres-env-unreachable": (["status"], 3),
    "migrate-sql-postgres": (
        ["migrate", "--sql", "--from-empty", "--store", "{pg_unreachable}"],
        0,
    ),
    "migrate-sql-pending-unreachable": (["migrate", "--sql", "--store", "{pg_unreachable}"], 3),
}
# These reach the test server (`{pg}`: its admin URL with a password, to another database), and
# do not run without one.
ON_POSTGRES: dict[str, tuple[list[str], int]] = {
    "postgres-no-such-database": (["status", "--store", "{pg}/no_such_db_9f"], 3),
    "migrate-check-no-such-database": (["migrate", "--check", "--store", "{pg}/no_such_db_9f"], 3),
    "postgres-ssl-refused": (["status", "--store", "{pg}/postgres?sslmode=require"], 3),
    "demo-on-no-such-database": (["demo", "--store", "{pg}/no_such_db_9f"], 3),
}


def error_path(states: States, tmp_path: Path, args: list[str], code: int, pg: str = "") -> Result:
    unreachable = pg_url(port=free_port())
    values = {
        "pg": pg,
        "registered": states.registered,
        "other": states.other,
        "legacy": states.legacy,
        "bad_key": states.bad_key,
        "bad_config": states.bad_config,
        "not_sqlite": states.not_sqlite,
        "fresh": f"sqlite:///{tmp_path / 'fresh.db'}",
        "nowhere": f"http://127.0.0.1:{free_port()}",
        "token": INVITATION,
        "password": DB_PASSWORD,
        "pg_unreachable": unreachable,
    }
    env = {PASSPHRASE_ENV: PASSPHRASE, "TALARIA_RELAY_STORE_URL": unreachable}
    words = [arg.format(**values) for arg in args]
    if words[0] == "demo" and "--relay-url" in words:
        words.append("--allow-insecure-loopback")
    result = run(tmp_path / "xdg", *words, timeout=60, env=env)
    assert result.code == code, result.describe()
    assert "Traceback" not in result.output, result.describe()
    watch = SecretWatch()
    for pem in states.pems:
        watch.add_pem(pem)
    watch.add("invitation", {INVITATION})
    watch.add_password(DB_PASSWORD)
    watch.add("passphrase", {PASSPHRASE})
    watch.assert_clean(result.output, where=f"output of talaria-relay {' '.join(args)}")
    return result


@pytest.mark.parametrize("case", sorted(ERROR_PATHS))
def test_no_command_path_prints_a_secret(states: States, tmp_path: Path, case: str) -> None:
    """Successes and every kind of failure of `talaria-relay` (bad store URLs with passwords,
    unreachable stores and relays, misplaced arguments, unreadable or conflicting stores) print
    no stored key, invitation, database password or passphrase, and no traceback."""
    error_path(states, tmp_path, *ERROR_PATHS[case])


@pytest.mark.postgres
@pytest.mark.parametrize("case", sorted(ON_POSTGRES))
def test_no_postgres_failure_prints_a_secret(
    states: States, tmp_path: Path, pg_admin_url: str, case: str
) -> None:
    """Failures from a real Postgres server (no such database, SSL refused) print neither the
    password nor any other secret."""
    server = make_url(pg_admin_url).set(password=DB_PASSWORD, database=None)
    pg = server.render_as_string(hide_password=False).rstrip("/")
    result = error_path(states, tmp_path, *ON_POSTGRES[case], pg=pg)
    assert ":***@" in result.stderr


# ── the relay origin, before any request ─────────────────────────────────────

TRUSTED = "https://relay.example"
near_trusted = st.sampled_from(
    [
        TRUSTED,
        f" {TRUSTED}//",
        "https://RELAY.example",
        "https://relay.example:443",
        "https://relay.example.",
        "http://relay.example",
        "https://relay.example/v1",
        "https://user@relay.example",
        "https://relay.example@evil.example",
        "https://evil.example#@relay.example",
        "https://relay.example\\@evil.example",
        "https://relay.example%2F@evil.example",
        "https://evil.example?https://relay.example",
        "https://relay.example\t.evil.example",
    ]
)


def answer_503(seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503)

    return httpx.MockTransport(handle)


async def pair_with(relay_url: str, seen: list[httpx.Request]) -> RelayPairingError:
    with tempfile.TemporaryDirectory() as state:
        async with (
            httpx.AsyncClient(transport=answer_503(seen)) as http,
            open_store(f"json://{state}") as store,
        ):
            service = RelayService(store, MemoryHost(["default"]), relay_url=TRUSTED, http=http)
            await service.start()
            body = {
                "relay_url": relay_url,
                "publisher_id": "https://hermes.example",
                "publisher_invitation": INVITATION,
            }
            try:
                await service.pair(body, "default", operator=True)
            except RelayPairingError as error:
                return error
            finally:
                await service.stop()
    raise AssertionError("a relay that answers 503 registered the server")


def trusted(relay_url: str) -> bool:
    try:
        return validated_origin(relay_url, https_only=True) == TRUSTED
    except InvalidInputError:
        return False


@given(near_trusted | origins() | st.text(max_size=40))
@example("https://relay.example.evil.example")
def test_an_untrusted_relay_origin_is_refused_before_any_request(relay_url: str) -> None:
    """Pairing with any relay URL but the trusted origin (as typed, bar spaces and trailing
    slashes) fails with 400 and no request at all; with the trusted one, every request goes to
    the trusted origin alone."""
    seen: list[httpx.Request] = []
    error = asyncio.run(pair_with(relay_url, seen))
    if not trusted(relay_url):
        assert error.status == 400, error
        assert seen == []
        return
    assert seen, error
    for request in seen:
        assert (request.url.scheme, request.url.host, request.url.port) == (
            "https",
            "relay.example",
            None,
        )


# ── the signature covers what is sent ────────────────────────────────────────

KEY = Ed25519PrivateKey.generate()
ids = st.one_of(
    # `.` and `..` last: Hypothesis starts from the first, and those two are refused.
    st.sampled_from(["%2e", "%2F", "a/b", "?q", "#f", "a b", "é", "😀", "\\", "'!*()", ".", ".."]),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=20),
)


def recording(seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    return httpx.MockTransport(handle)


async def put(path: str, body: bytes, seen: list[httpx.Request]) -> bool:
    """Send a signed PUT of `body` to `path`; False if the client refused to send it."""
    async with httpx.AsyncClient(transport=recording(seen)) as http:
        client = RelayClient(TRUSTED, http=http)
        try:
            await client.put(path, body, key=KEY, key_id="key_1")
        except InvalidInputError:
            return False
    return True


@given(
    origins(),
    ids,
    st.none() | st.tuples(ids, st.sampled_from(["viewed", "started"])),
    st.binary(max_size=200),
)
def test_the_signature_covers_exactly_the_path_and_body_sent(
    publisher_id: str, profile_id: str, session: tuple[str, str] | None, body: bytes
) -> None:
    """For any ids and body, the request either is refused before it is sent or goes out on the
    path as built with the body as given, and its signature verifies over exactly the raw path
    and body the transport received (and not over any other path or body)."""
    if session is None:
        path = snapshot_path(publisher_id, profile_id)
    else:
        path = session_path(publisher_id, profile_id, *session)
    seen: list[httpx.Request] = []
    if not asyncio.run(put(path, body, seen)):
        event("refused: a path httpx would rewrite")
        assert seen == []
        return
    event("sent")
    (request,) = seen
    assert request.url.raw_path == path.encode()
    assert request.content == body
    public = KEY.public_key()
    verify(public, "PUT", request.url.raw_path, request.headers, request.content)
    with pytest.raises(InvalidSignature):
        verify(public, "PUT", request.url.raw_path + b"x", request.headers, request.content)
    with pytest.raises(InvalidSignature):
        verify(public, "PUT", request.url.raw_path, request.headers, request.content + b" ")
