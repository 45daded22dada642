"""Serve an ASGI app (the dev relay) over real HTTP on loopback, with uvicorn.

    async with serve(DevRelay()) as base_url:   # e.g. "http://127.0.0.1:54321"
        ...

uvicorn is imported only here and only when called, so `relay.testing` works without it. Only
loopback addresses are accepted: the dev relay's admin endpoints have no authentication.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

from relay.errors import InvalidInputError, MissingExtraError

# Enough for a quick answer to finish; a request stalled by an injected delay is cancelled.
SHUTDOWN_GRACE_S = 1


def uvicorn_module() -> Any:
    """uvicorn, which the `devrelay` extra brings; without it, `MissingExtraError` naming the
    extra (a caller checks this before it changes anything)."""
    try:
        import uvicorn
    except ModuleNotFoundError as error:
        if error.name != "uvicorn":
            raise
        raise MissingExtraError("the dev relay", "uvicorn", "devrelay") from None
    return uvicorn


def _loopback(host: str) -> str:
    if host == "localhost":
        return "127.0.0.1"
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return host
    raise InvalidInputError(f"the dev relay serves loopback addresses only, not {host!r}")


def _config(app: Any, host: str, port: int, **logging: Any) -> Any:
    return uvicorn_module().Config(
        app,
        host=host,
        port=port,
        lifespan="off",
        http="h11",
        ws="none",
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        # The dev relay sends its own Date, by its own (possibly fake) clock.
        date_header=False,
        **logging,
    )


@contextlib.asynccontextmanager
async def serve(app: Any, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Run `app` in this event loop as a background task; yield its base URL; stop it on exit.

    Port 0 picks a free ephemeral port. The socket is bound here, before uvicorn starts, so the
    URL is known and a bind error is raised to the caller rather than exiting the process.
    """
    uvicorn_module()  # without the extra: the error that names it, not a bare ImportError
    import uvicorn

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # Ctrl-C belongs to the host process (pytest, the CLI), not to this task

    address = _loopback(host)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
    except OSError:
        sock.close()
        raise
    bound_port = sock.getsockname()[1]
    # log_config=None leaves the host process's logging configuration alone.
    quiet = {"log_config": None, "log_level": "warning", "access_log": False}
    server = _Server(_config(app, address, bound_port, **quiet))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                await task  # startup failed: raise its error
                raise RuntimeError("the dev relay server stopped during startup")
            await asyncio.sleep(0.01)
        shown = f"[{address}]" if family == socket.AF_INET6 else address
        yield f"http://{shown}:{bound_port}"
    finally:
        server.should_exit = True
        try:
            await task
        finally:
            sock.close()


def run(app: Any, host: str = "127.0.0.1", port: int = 8787) -> None:
    """Serve `app` on loopback until interrupted (blocking), for a CLI."""
    server = uvicorn_module().Server(_config(app, _loopback(host), port, log_level="info"))
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how it is meant to stop
        server.run()
