"""Postgres store URLs naming several servers, in every form libpq and asyncpg both take.

Each form resolves to the same servers as asyncpg itself reads them from the DSN the store hands
it, renders and parses back unchanged, and shows no password. On the main server: a URL whose
first host is down connects to the next, and `target_session_attrs` picks by role.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from asyncpg import connect_utils
from backends import on
from cli_support import run
from sqlalchemy import make_url

from relay.errors import InvalidInputError, StoreUnavailableError
from relay.store import open_store, resolve
from relay.store.hosts import servers
from relay.store.sql.drivers.postgres import connect_options

FORMS = {
    "port-per-host": (
        "postgresql://u:s3cret@h1:5432,h2:5433/db",
        [("h1", 5432), ("h2", 5433)],
        "postgresql://u:***@h1:5432,h2:5433/db",
    ),
    "ports-apart": (
        "postgresql://u@h1,h2/db?port=5432,5433",
        [("h1", 5432), ("h2", 5433)],
        "postgresql://u@h1,h2/db?port=5432,5433",
    ),
    "one-port-for-all": (
        "postgres://u@h1,h2/db?port=6432",
        [("h1", 6432), ("h2", 6432)],
        "postgres://u@h1,h2/db?port=6432",
    ),
    "hosts-apart": (
        "postgresql://u@/db?host=h1,h2&port=5432,5433&target_session_attrs=read-write",
        [("h1", 5432), ("h2", 5433)],
        "postgresql://u@/db?host=h1,h2&port=5432,5433&target_session_attrs=read-write",
    ),
    "no-ports": (
        "postgresql://u@h1,h2,h3/db",
        [("h1", None), ("h2", None), ("h3", None)],
        "postgresql://u@h1,h2,h3/db",
    ),
    "ipv6": (
        "postgresql://u@[::1]:5432,[fd00::2]/db",
        [("::1", 5432), ("fd00::2", None)],
        "postgresql://u@[::1]:5432,[fd00::2]/db",
    ),
    "ipv6-bare-in-query": (
        "postgresql://u@/db?host=::1,h2",
        [("::1", None), ("h2", None)],
        "postgresql://u@/db?host=::1,h2",
    ),
    "socket-dir": (
        "postgresql://u@/db?host=/var/run/postgresql&port=5433",
        [("/var/run/postgresql", 5433)],
        "postgresql://u@/db?host=/var/run/postgresql&port=5433",
    ),
    "one-host": (
        "postgresql://u@db.internal:6432/relay",
        [("db.internal", 6432)],
        "postgresql://u@db.internal:6432/relay",
    ),
}


def asyncpg_reads(url: Any) -> list[tuple[str, int]]:
    """The (host, port) pairs asyncpg itself takes from the DSN the store would hand it."""
    options = connect_options(url)
    addrs, _params, _config = connect_utils._parse_connect_arguments(
        dsn=options["dsn"],
        host=None,
        port=None,
        user=None,
        password=None,
        passfile=None,
        database=None,
        command_timeout=None,
        statement_cache_size=100,
        max_cached_statement_lifetime=300,
        max_cacheable_statement_size=1024,
        ssl=None,
        direct_tls=False,
        server_settings=options.get("server_settings"),
        target_session_attrs=None,
        krbsrvname=None,
        gsslib=None,
        service=None,
        servicefile=None,
    )
    found = []
    for addr in addrs:
        if isinstance(addr, str):  # a Unix socket: DIR/.s.PGSQL.PORT
            directory, _, name = addr.rpartition("/")
            found.append((directory, int(name.rsplit(".", 1)[1])))
        else:
            found.append((addr[0], addr[1]))
    return found


@pytest.mark.parametrize(("raw", "expected", "shown"), FORMS.values(), ids=FORMS.keys())
def test_every_multi_host_form_names_the_servers_asyncpg_connects_to(
    raw: str, expected: list[tuple[str, int | None]], shown: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each form gives the servers it names, asyncpg reads the same from the store's DSN (5432
    where none is given), the URL shows as written, password hidden, and parses back unchanged."""
    monkeypatch.delenv("PGPORT", raising=False)
    target = resolve(raw)
    assert target.url is not None
    assert servers(target.url) == expected
    assert asyncpg_reads(target.url) == [(h, 5432 if p is None else p) for h, p in expected]
    assert target.display == shown
    again = resolve(target.url.render_as_string(hide_password=False))
    assert again.url == target.url
    assert "s3cret" not in target.display


BAD = {
    "port-text": ("postgresql://u:s3cret@h1:5432,h2:x/db", "a port is not a number"),
    "port-range": ("postgresql://u@h1:5432,h2:70000/db", "port 70000 is not in 1..65535"),
    "port-count": ("postgresql://u@h1,h2/db?port=1,2,3", "3 ports for 2 hosts"),
    "ports-twice": ("postgresql://u@h1:5432,h2/db?port=5432", "gives ports twice"),
    "hosts-twice": ("postgresql://u@h1/db?host=h2", "names its hosts twice"),
    "ipv6-unbracketed": ("postgresql://u@::1/db", "IPv6 host without brackets"),
    "ipv6-unclosed": ("postgresql://u@[::1/db", "malformed IPv6 host"),
    "empty-host": ("postgresql://u@h1,,h2/db", "empty host"),
    "ports-no-host": ("postgresql://u@/db?port=1,2", "several ports but no host"),
    "no-at-sign": ("postgresql://u:s3cret/db", "a port is not a number"),
}


@pytest.mark.parametrize(("raw", "fragment"), BAD.values(), ids=BAD.keys())
def test_a_host_list_that_cannot_work_is_refused_naming_why(raw: str, fragment: str) -> None:
    """A host list no server could answer: InvalidInputError saying why, never the password."""
    with pytest.raises(InvalidInputError) as caught:
        resolve(raw)
    assert fragment in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_a_bad_pgtargetsessionattrs_is_refused_unless_the_url_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PGTARGETSESSIONATTRS, which asyncpg reads, is checked like the URL's parameter, and the
    URL's own value wins."""
    monkeypatch.setenv("PGTARGETSESSIONATTRS", "whichever")
    with pytest.raises(InvalidInputError, match="PGTARGETSESSIONATTRS='whichever'"):
        resolve("postgresql://u@h1,h2/db")
    resolve("postgresql://u@h1,h2/db?target_session_attrs=primary")
    monkeypatch.setenv("PGTARGETSESSIONATTRS", "read-write")
    resolve("postgresql://u@h1,h2/db")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def first_host_down(store_url: str, **query: str) -> str:
    """`store_url` with a server that is not there listed before its own."""
    url = make_url(store_url)
    auth = url.username or ""
    params = "&".join(f"{k}={v}" for k, v in query.items())
    text = f"postgresql://{auth}@127.0.0.1:{free_port()},{url.host}:{url.port or 5432}"
    return f"{text}/{url.database}" + (f"?{params}" if params else "")


@on("postgres")
async def test_a_store_connects_to_the_next_host_when_the_first_is_down(store_url: str) -> None:
    """The first host refuses; the store opens on the second and works."""
    async with open_store(first_host_down(store_url, target_session_attrs="read-write")) as store:
        (allocated,) = await store.allocate_revisions(1, 1_800_000_000_000)
        assert await store.revision_floor() == allocated


@on("postgres")
async def test_no_host_of_the_wanted_role_is_unavailable(store_url: str) -> None:
    """Asking for a standby where there is only a primary: unavailable, not a crash."""
    with pytest.raises(StoreUnavailableError):
        await open_store(first_host_down(store_url, target_session_attrs="standby"))


@on("postgres")
def test_the_commands_take_a_port_per_host(pg_database: str, tmp_path: Path) -> None:
    """`migrate`, `status` and `check` on a URL with a port per host, the first host down (the
    form once refused as malformed): each works on the second host."""
    home = tmp_path / "xdg"
    home.mkdir()
    url = first_host_down(pg_database, target_session_attrs="read-write")
    for command in (["migrate"], ["migrate", "--check"], ["status", "--json"]):
        result = run(home, *command, "--store", url, timeout=60)
        assert result.code == 0, result.describe()
    result = run(home, "check", "--store", url, timeout=60)
    assert result.code == 1, result.describe()  # migrated, not registered
    assert "not registered" in result.stdout
