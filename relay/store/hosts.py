"""The servers a Postgres store URL names, in every form libpq and asyncpg both take:

    postgresql://u@h1:5432,h2:5433/db            a port per host
    postgresql://u@h1,h2/db?port=5432,5433       ports apart (one port: every host's)
    postgresql://u@/db?host=h1,h2&port=5432      hosts apart; `host=/run/postgresql` a socket dir
    postgresql://u@[::1]:5432,[fd00::2]/db       IPv6 in brackets (in `?host=`, bare too)

A store URL keeps them in one canonical place, so it renders and parses back the same: one
network host in the URL's host and port, anything else (several hosts, a socket directory) as
libpq's `?host=…&port=…`. asyncpg gets them as a host list in its DSN, each with its own port:
asyncpg silently ignores `?port=` when the hosts come before the database name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from urllib.parse import quote, unquote, urlencode

from sqlalchemy import URL

from relay.errors import InvalidInputError

Server = tuple[str, int | None]
_BRACKETED = re.compile(r"\[([0-9A-Fa-f:.%A-Za-z]+)\](?::([^:]*))?")


def parse(netloc: str, query_host: str | None, query_port: str | None) -> list[Server]:
    """The servers of a URL: `netloc` is what lies between the `@` and the database name."""
    if netloc.startswith(":") and netloc.count(":") == 1 and "," not in netloc:
        named: list[Server] = [("", _port(netloc[1:]))]  # a port alone: the default host's
    else:
        named = _hostlist(netloc, in_query=False) if netloc else []
    if query_host is not None:
        if named:
            raise InvalidInputError(
                "store URL names its hosts twice: before the database name and as ?host="
            )
        named = _hostlist(query_host, in_query=True)
    if query_port is not None:
        if any(port is not None for _, port in named):
            raise InvalidInputError("store URL gives ports twice: after a host and as ?port=")
        ports = [_port(p) if p else None for p in query_port.split(",")]
        if not named:
            if len(ports) > 1:
                raise InvalidInputError("store URL gives several ports but no host")
            return [("", ports[0])]
        if len(ports) == 1:
            ports *= len(named)
        if len(ports) != len(named):
            raise InvalidInputError(
                f"store URL gives {len(ports)} ports for {len(named)} hosts: give one port, "
                "or one per host"
            )
        named = [(host, port) for (host, _), port in zip(named, ports, strict=True)]
    return named


def placed(url: URL, servers: Sequence[Server]) -> URL:
    query = {k: v for k, v in url.query.items() if k not in ("host", "port")}
    if not servers:
        return url.set(host=None, port=None, query=query)
    if len(servers) == 1 and not servers[0][0].startswith("/"):
        host, port = servers[0]
        return url.set(host=host or None, port=port, query=query)
    query["host"] = ",".join(host for host, _ in servers)
    if any(port is not None for _, port in servers):
        query["port"] = ",".join("" if port is None else str(port) for _, port in servers)
    return url.set(host=None, port=None, query=query)


def servers(url: URL) -> list[Server]:
    """The servers of a canonical store URL, in order."""
    host, port = url.query.get("host"), url.query.get("port")
    if isinstance(host, str):
        return parse("", host, port if isinstance(port, str) else None)
    if url.host is None and url.port is None:
        return []
    return [(url.host or "", url.port)]


def render(url: URL) -> str:
    """`url` as a string, its password hidden; several servers as libpq's `h1:p1,h2:p2`."""
    found = servers(url)
    if len(found) < 2:
        return url.render_as_string(hide_password=True)
    query = {k: v for k, v in url.query.items() if k not in ("host", "port")}
    return _text(url.drivername, url, found, query, "***")


def dsn(url: URL, query: dict[str, str]) -> str:
    """asyncpg's DSN for `url`, with `query` as its parameters: hosts each with its port."""
    found = servers(url)
    params = dict(query)
    if found and not found[0][0]:
        # A port and no host: asyncpg's default hosts (the socket directories, localhost).
        params["port"] = str(found[0][1])
        found = []
    return _text("postgresql", url, found, params, quote(str(url.password), safe=""))


def _text(
    scheme: str, url: URL, found: Sequence[Server], query: Mapping[str, object], password: str
) -> str:
    """The URL's text with `password` shown for its password, if it has one."""
    auth = ""
    if url.username is not None:
        auth = quote(url.username, safe="")
        if url.password is not None:
            auth += ":" + password
        auth += "@"
    netloc = ",".join(_server_text(host, port) for host, port in found)
    text = f"{scheme}://{auth}{netloc}/{quote(url.database or '', safe='')}"
    return f"{text}?{urlencode(sorted(query.items()))}" if query else text


def _server_text(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else quote(host, safe="")
    return shown if port is None else f"{shown}:{port}"


def _hostlist(text: str, *, in_query: bool) -> list[Server]:
    if "" in text.split(","):
        raise InvalidInputError("store URL has an empty host in its host list")
    return [_server(spec, in_query=in_query) for spec in text.split(",")]


def _server(spec: str, *, in_query: bool) -> Server:
    if spec.startswith("["):
        match = _BRACKETED.fullmatch(spec)
        if match is None:
            raise InvalidInputError("store URL has a malformed IPv6 host (use [::1]:5432)")
        return match[1], _port(match[2]) if match[2] else None
    if in_query and (spec.startswith("/") or spec.count(":") > 1):
        return spec, None  # a socket directory, or a bare IPv6 address (libpq's ?host=)
    host, colon, port = spec.partition(":")
    if not in_query:
        if spec.count(":") > 1:
            raise InvalidInputError("store URL has an IPv6 host without brackets: write [::1]")
        host = unquote(host)  # a socket directory is %2F-quoted there
    if not host:
        raise InvalidInputError("store URL has a port without a host in its host list")
    return host, _port(port) if colon else None


def _port(text: str) -> int:
    # Never the text itself: a URL missing its `@` has its password where a port would be.
    if not text.isascii() or not text.isdigit():
        raise InvalidInputError("store URL is malformed: a port is not a number")
    port = int(text)
    if not 1 <= port <= 65535:
        raise InvalidInputError(f"store URL port {port} is not in 1..65535")
    return port
