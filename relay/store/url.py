"""Store URLs: which backend, where, and how to show it without its password."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sqlalchemy import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError

from relay.errors import InvalidInputError, StoreError, StoreUnavailableError

ENV_VAR = "TALARIA_RELAY_STORE_URL"
SUPPORTED = (
    "sqlite+aiosqlite:///PATH",
    "sqlite:///PATH",
    "postgresql+asyncpg://USER@HOST/DB",
    "postgresql://…",
    "postgres://…",
    "json:///STATE-DIR",
)

Backend = Literal["json", "sqlite", "postgres"]


@dataclass(frozen=True, slots=True)
class StoreTarget:
    """A parsed store URL; `url` is the canonical SQLAlchemy URL of a SQL backend."""

    backend: Backend
    path: Path | None = None
    url: URL | None = None

    @property
    def display(self) -> str:
        if self.url is not None:
            return self.url.render_as_string(hide_password=True)
        return f"json://{self.path}"

    @property
    def sqlalchemy_url(self) -> URL:
        if self.url is None:
            raise InvalidInputError("JSON stores have no database schema")
        return self.url


def default_sqlite_path() -> Path:
    """The embedded store of this user: `$XDG_STATE_HOME/talaria-relay/relay.db`."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "talaria-relay" / "relay.db"


def resolve(raw: str | None = None) -> StoreTarget:
    """Parse `raw`, else `$TALARIA_RELAY_STORE_URL`, else the embedded SQLite default."""
    raw = (raw or os.environ.get(ENV_VAR) or "").strip()
    if not raw:
        return StoreTarget("sqlite", default_sqlite_path(), _sqlite_url(default_sqlite_path()))
    scheme = raw.split("://", 1)[0].lower() if "://" in raw else ""
    if scheme == "json":
        directory = raw.split("://", 1)[1]
        if not directory:
            raise InvalidInputError("json store URL needs a directory: json:///path/to/state-dir")
        return StoreTarget("json", Path(directory).expanduser())
    if scheme in ("sqlite", "sqlite+aiosqlite", "sqlite+pysqlite"):
        database = _parse(raw).database
        if not database or database == ":memory:" or database.startswith("file:"):
            raise InvalidInputError(
                "sqlite store URL needs a file path: sqlite:///path/to/relay.db"
            )
        path = Path(database).expanduser()
        return StoreTarget("sqlite", path, _sqlite_url(path))
    if scheme in ("postgres", "postgresql", "postgresql+asyncpg"):
        return StoreTarget("postgres", url=_postgres_url(_parse("postgresql" + raw[len(scheme) :])))
    shown = raw if "@" not in raw else raw.split("://", 1)[0] + "://…"
    raise InvalidInputError(f"unsupported store URL {shown!r}; use one of: " + ", ".join(SUPPORTED))


def _parse(raw: str) -> URL:
    try:
        return make_url(raw)
    except (ArgumentError, ValueError) as exc:
        raise InvalidInputError(f"store URL is malformed: {exc}") from None


def _sqlite_url(path: Path) -> URL:
    return URL.create("sqlite+aiosqlite", database=str(path))


def _postgres_url(url: URL) -> URL:
    if not url.database:
        raise InvalidInputError("postgres store URL needs a database name")
    query = dict(url.query)
    # libpq spells it sslmode; asyncpg takes the same values as ssl.
    if "sslmode" in query:
        query["ssl"] = query.pop("sslmode")
    return url.set(drivername="postgresql+asyncpg", query=query)


def driver_error(exc: BaseException, target: StoreTarget) -> StoreError:
    """A driver's exception as a `StoreError` that names the store but never its password."""
    text = str(getattr(exc, "orig", None) or exc)
    message = text.splitlines()[0] if text else type(exc).__name__
    password = target.url.password if target.url is not None else None
    if password:
        message = message.replace(password, "***")
    if isinstance(exc, DBAPIError) and not (
        exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError)
    ):
        return StoreError(f"relay store {target.display} failed: {message}")
    return StoreUnavailableError(f"relay store {target.display} is unavailable: {message}")
