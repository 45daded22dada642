"""Store URLs: which backend, where, and how to show it without its password.

A Postgres URL may name several servers, as libpq does (`relay.store.hosts`): the store
connects to the first that answers and matches `target_session_attrs`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sqlalchemy import URL, make_url
from sqlalchemy.exc import ArgumentError

from relay import hints
from relay.errors import InvalidInputError
from relay.store import budget, hosts, paths

ENV_VAR = "TALARIA_RELAY_STORE_URL"
# A store in this process only: each open is a new, empty one.
MEMORY = "memory://"
SUPPORTED = (
    "sqlite+aiosqlite:///PATH",
    "sqlite:///PATH",
    "postgresql+asyncpg://USER@HOST/DB",
    "postgresql://…",
    "postgres://…",
    "json:///STATE-DIR",
    "memory://",
)

Backend = Literal["json", "sqlite", "postgres", "memory"]
NAMES: dict[Backend, str] = {
    "json": "JSON",
    "sqlite": "SQLite",
    "postgres": "Postgres",
    "memory": "memory",
}
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
SSL_FILES = ("sslcert", "sslkey", "sslrootcert")
# Besides the connection budget's (`budget.PARAMETERS`) and the TLS files.
_CONNECTION_PARAMETERS = (
    "application_name",
    "connect_timeout",
    "host",
    "options",
    "port",
    "prepared_statement_cache_size",
    "schema",
    "ssl",
    "sslmode",
    "target_session_attrs",
)
POSTGRES_PARAMETERS = tuple(sorted({*_CONNECTION_PARAMETERS, *budget.PARAMETERS, *SSL_FILES}))
# libpq's environment variable for target_session_attrs, which asyncpg reads too.
TARGET_ENV = "PGTARGETSESSIONATTRS"
# The user and password part of a URL, read as SQLAlchemy reads it.
_USERINFO = re.compile(r"(?:[^:/]*(?::[^@]*)?@)?")
# libpq's spellings, and what they mean here.
SSL_BOOLEANS = {"true": "require", "1": "require", "false": "disable", "0": "disable"}
TARGET_SESSION_ATTRS = ("any", "primary", "standby", "prefer-standby", "read-write", "read-only")
# A Postgres schema the URL may name (`?schema=`): an unquoted identifier, so a search_path entry
# and a name in SQL are the same string.
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# `options=-c search_path=NAME` as libpq takes it (`-csearch_path=`, `--search_path=` too).
_SEARCH_PATH = re.compile(r"(?:-c\s*|--)search_path=([^\s,]+)")
# An hour: past that, a "timeout" is a typo, not a wait anyone means.
MAX_CONNECT_TIMEOUT_S = 3600.0
MAX_STATEMENT_CACHE = 100_000


@dataclass(frozen=True, slots=True)
class StoreTarget:
    """A parsed store URL; `url` is the canonical SQLAlchemy URL of a SQL backend; `written`
    the URL as the user wrote it, its password hidden (None for the embedded default)."""

    backend: Backend
    path: Path | None = None
    url: URL | None = None
    written: str | None = field(default=None, compare=False)

    @property
    def display(self) -> str:
        """The URL for messages: as written (not the driver's scheme), without its password."""
        if self.written is not None:
            return self.written
        if self.url is not None:
            return hosts.render(self.url)
        return MEMORY if self.backend == "memory" else f"json://{self.path}"

    @property
    def name(self) -> str:
        """The backend as messages name it: JSON, SQLite, Postgres or memory."""
        return NAMES[self.backend]

    @property
    def sqlalchemy_url(self) -> URL:
        if self.url is None:
            raise InvalidInputError(f"{self.name} stores have no database schema")
        return self.url


def default_sqlite_path() -> Path:
    """The embedded store of this user: `$XDG_STATE_HOME/talaria-relay/relay.db`."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "talaria-relay" / "relay.db"


def require_directory(target: StoreTarget) -> None:
    """`InvalidInputError` naming the fix when the directory a file store's path needs is
    missing, unless it is the embedded default's own (ours to make). Only `talaria-relay migrate`
    creates a directory a user named: elsewhere a missing one is a typo, refused at once."""
    if target.path is None or target.backend not in ("sqlite", "json"):
        return
    parent = target.path.expanduser().absolute().parent
    if not parent.exists() and target.path != default_sqlite_path():
        fix = f", or run {command('migrate', target)}, which does" * (target.backend == "sqlite")
        raise InvalidInputError(
            f"no directory {parent} for the {target.name} store {target.display}: "
            f"create it{fix}; nothing created"
        )


def resolve(raw: str | None = None) -> StoreTarget:
    """Parse `raw`, else `$TALARIA_RELAY_STORE_URL`, else the embedded SQLite default; nothing
    is created on disk, so a refused URL leaves no trace."""
    raw = (_checked_raw(raw) or _checked_raw(os.environ.get(ENV_VAR))).strip()
    if not raw:
        return StoreTarget("sqlite", default_sqlite_path(), _sqlite_url(default_sqlite_path()))
    scheme, separator, rest = raw.partition("://")
    scheme = scheme.lower() if separator else ""
    if scheme == "memory":
        if rest:
            raise InvalidInputError(f"memory store URL takes nothing after {MEMORY!r}")
        return StoreTarget("memory")
    if scheme == "json":
        if not rest:
            raise InvalidInputError("json store URL needs a directory: json:///path/to/state-dir")
        return StoreTarget("json", _json_path(rest), written=raw)
    if scheme in ("sqlite", "sqlite+aiosqlite", "sqlite+pysqlite"):
        path = _sqlite_path(_parse(raw))
        return StoreTarget("sqlite", path, _sqlite_url(path), written=raw)
    if scheme in ("postgres", "postgresql", "postgresql+asyncpg"):
        url = _postgres_url(rest)
        return StoreTarget("postgres", url=url, written=_without_password(raw, url))
    shown = raw if "@" not in raw else raw.partition("://")[0] + "://…"
    raise InvalidInputError(f"unsupported store URL {shown!r}; use one of: " + ", ".join(SUPPORTED))


def _userinfo(rest: str) -> tuple[str, str]:
    """What follows `scheme://`, cut into its user part (maybe empty) and what comes after."""
    found = _USERINFO.match(rest)
    assert found is not None  # the pattern matches the empty string
    return found.group(0), rest[found.end() :]


def _without_password(raw: str, url: URL) -> str:
    """`raw` with the password of its user part as `***`, found as the parser found it."""
    scheme, rest = raw.split("://", 1)
    userinfo, after = _userinfo(rest)
    user, colon, _password = userinfo.rstrip("@").partition(":")
    shown = f"{scheme}://{f'{user}:***@' if colon else userinfo}{after}"
    if url.password:  # whatever the pattern missed, the parsed password never shows
        shown = shown.replace(str(url.password), "***")
    return shown


def _checked_raw(raw: object) -> str:
    if raw is None:
        return ""
    if type(raw) is not str:
        raise InvalidInputError(f"store URL must be a string, not {type(raw).__name__}")
    if "\x00" in raw:
        raise InvalidInputError("store URL must not contain NUL")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("store URL must not contain unpaired surrogates") from None
    return raw


def _parse(raw: str) -> URL:
    try:
        url = make_url(raw)
        port = url.port
    except (ArgumentError, ValueError, TypeError) as exc:
        # The message may quote the URL, password included.
        raise InvalidInputError(f"store URL is malformed ({type(exc).__name__})") from None
    if port is not None and not 1 <= port <= 65535:
        raise InvalidInputError(f"store URL port {port} is not in 1..65535")
    for name, value in url.query.items():
        if not isinstance(value, str):
            raise InvalidInputError(f"store URL parameter {name!r} is given more than once")
    return url


def _json_path(directory: str) -> Path:
    path, query = directory.partition("?")[::2]
    if query:
        raise InvalidInputError(f"json store URL takes no parameters, got {query!r}")
    resolved = paths.usable("json store directory", Path(path).expanduser().absolute())
    if resolved.exists() and not resolved.is_dir():
        raise InvalidInputError(f"json store directory {resolved} exists and is not a directory")
    return Path(path).expanduser()


def _sqlite_path(url: URL) -> Path:
    database = url.database
    if url.host:
        # sqlite://relay.db: the file name landed in the host part.
        raise InvalidInputError(
            f"sqlite store URL names host {url.host!r}: use sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    if not database or database == ":memory:" or database.startswith("file:"):
        raise InvalidInputError("sqlite store URL needs a file path: sqlite:///path/to/relay.db")
    if url.query:
        raise InvalidInputError(
            f"sqlite store URL takes no parameters, got {', '.join(sorted(url.query))}"
        )
    path = Path(database).expanduser()
    resolved = paths.usable("sqlite store path", path.absolute())
    if resolved.is_dir():
        raise InvalidInputError(f"sqlite store path {resolved} is a directory, not a file")
    if resolved.parent.exists() and not resolved.parent.is_dir():
        raise InvalidInputError(
            f"sqlite store path {resolved}: {resolved.parent} is not a directory"
        )
    return path


def _sqlite_url(path: Path) -> URL:
    return URL.create("sqlite", database=str(path))


def _postgres_url(rest: str) -> URL:
    """What follows `postgresql://`: the servers parsed here (SQLAlchemy reads one), in the
    canonical place `hosts` says; the rest by SQLAlchemy."""
    userinfo, after = _userinfo(rest)
    cut = min((i for i in (after.find("/"), after.find("?")) if i >= 0), default=len(after))
    url = _parse("postgresql+asyncpg://" + userinfo + after[cut:])
    query = {name: str(value) for name, value in url.query.items()}
    servers = hosts.parse(after[:cut], query.get("host"), query.get("port"))
    return _postgres_checked(hosts.placed(url, servers))


def _postgres_checked(url: URL) -> URL:
    if not url.database:
        raise InvalidInputError("postgres store URL needs a database name")
    query = {name: str(value) for name, value in url.query.items()}
    unknown = sorted(set(query) - set(POSTGRES_PARAMETERS))
    if unknown:
        raise InvalidInputError(
            f"unknown postgres store URL parameter {', '.join(map(repr, unknown))}; "
            f"supported: {', '.join(POSTGRES_PARAMETERS)}"
        )
    if "ssl" in query and "sslmode" in query:
        raise InvalidInputError("postgres store URL gives both ssl and sslmode")
    # libpq spells it sslmode; asyncpg takes the same values as ssl.
    if "sslmode" in query:
        query["ssl"] = query.pop("sslmode")
    if "ssl" in query:
        mode = query["ssl"].strip().lower()
        query["ssl"] = SSL_BOOLEANS.get(mode, mode)
        if query["ssl"] not in SSLMODES:
            raise InvalidInputError(
                f"store URL parameter sslmode={mode!r}: use one of {', '.join(SSLMODES)}"
            )
    _session_attrs(query.get("target_session_attrs"))
    _schema_option(query)
    budget.budget(query)
    for name in SSL_FILES:
        # A missing file would surface as an unexplained TLS failure at connect time.
        path = query.get(name)
        if path is not None and path != "system" and not Path(path).expanduser().is_file():
            raise InvalidInputError(f"store URL parameter {name}: no file at {path}")
    if "connect_timeout" in query:
        timeout = budget.number(query["connect_timeout"])
        if not 0 < timeout <= MAX_CONNECT_TIMEOUT_S:  # NaN fails this too
            raise InvalidInputError(
                f"connect_timeout must be a number of seconds in (0, {MAX_CONNECT_TIMEOUT_S:g}]"
            )
    if "prepared_statement_cache_size" in query:
        size = query["prepared_statement_cache_size"]
        if not size.isascii() or not size.isdigit() or int(size) > MAX_STATEMENT_CACHE:
            raise InvalidInputError(
                f"prepared_statement_cache_size must be an integer in 0..{MAX_STATEMENT_CACHE}"
            )
    return url.set(query=query)


def _session_attrs(attrs: str | None) -> None:
    if attrs is not None and attrs not in TARGET_SESSION_ATTRS:
        raise InvalidInputError(
            f"store URL parameter target_session_attrs={attrs!r}: use one of "
            + ", ".join(TARGET_SESSION_ATTRS)
        )
    from_env = os.environ.get(TARGET_ENV)
    if attrs is None and from_env is not None and from_env not in TARGET_SESSION_ATTRS:
        # asyncpg reads it when the URL says nothing, and would refuse it at every connect.
        raise InvalidInputError(
            f"{TARGET_ENV}={from_env!r}: use one of " + ", ".join(TARGET_SESSION_ATTRS)
        )


def _schema_option(query: dict[str, str]) -> None:
    """`schema=NAME` becomes `options=-csearch_path=NAME`: every relay object lands in it. A
    search_path option's first schema must be such a name too (`migrate` creates it)."""
    name = query.pop("schema", None)
    if name is None:
        first = _first_schema(query.get("options", ""))
        if first not in ("public", "$user") and not _SCHEMA.fullmatch(first):
            raise InvalidInputError(
                f"store URL search_path schema {first!r}: use a lowercase name of letters, "
                "digits and _"
            )
        return
    if not _SCHEMA.fullmatch(name):
        raise InvalidInputError(
            f"store URL parameter schema={name!r}: use a lowercase name of letters, digits and _"
        )
    options = query.get("options", "")
    if _SEARCH_PATH.search(options):
        raise InvalidInputError("postgres store URL gives both schema and a search_path option")
    query["options"] = f"{options} -csearch_path={name}".strip()


def schema_name(url: URL) -> str | None:
    """The Postgres schema a store URL puts the relay in (`?schema=`, or the first entry of a
    `search_path` option); None: the server's default (`public`)."""
    first = _first_schema(str(url.query.get("options", "")))
    return None if first in ("", "public", "$user") else first


def _first_schema(options: str) -> str:
    """The first schema of a search_path option; `public` without one."""
    found = _SEARCH_PATH.search(options)
    return found.group(1).strip('"') if found else "public"


def command(args: str, store: StoreTarget | str | None) -> str:
    """`relay.hints.command` about a target (or a URL as `StoreTarget.display` shows it): no
    `--store` for the embedded default or None."""
    if isinstance(store, StoreTarget):
        store = None if store.written is None and store.backend == "sqlite" else store.display
    return hints.command(args, store)


def source(raw: str | None) -> str:
    """Where `resolve(raw)` takes its URL from, for messages."""
    if raw and raw.strip():
        return "--store"
    if os.environ.get(ENV_VAR, "").strip():
        return f"${ENV_VAR}"
    return "the embedded default"
