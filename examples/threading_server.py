"""A stdlib `ThreadingHTTPServer` app in the shape of Hermes WebUI, publishing to Talaria Relay.

    TALARIA_RELAY_STORE_URL=sqlite:///relay.db python -m examples.threading_server --port 8788

One thread per request, as Hermes WebUI runs: the handler sends `/api/talaria/…` to the relay
routes (`relay.wsgi.Router.dispatch`, the table `relay.asgi` serves too) and its own routes to
`Hermes`, which calls the blocking `ThreadedRelayService`. Sessions live in memory.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from examples.hermes import TOKENS, Hermes, NotFound, Sessions, relay_from_env
from relay.routes import Answer, Caller, encode
from relay.threaded import ThreadedRelayService
from relay.wsgi import Router

TURN = re.compile(r"^/api/sessions/([\w.-]+)/turn(/end)?$")
SESSION = re.compile(r"^/api/sessions/([\w.-]+)$")
MAX_APP_BODY = 64 * 1024


class WebServer(ThreadingHTTPServer):
    """The server holds the app; each request's handler runs in a thread of its own."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], hermes: Hermes) -> None:
        super().__init__(address, Handler)
        self.hermes = hermes
        self.router = Router(hermes.relay, lambda _environ: None)


class Handler(BaseHTTPRequestHandler):
    server: WebServer
    protocol_version = "HTTP/1.1"
    _unread = False

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet; a real app logs its own way

    def _handle(self, method: str) -> None:
        # A body left unread (a refused caller) would be read as the next request: close then.
        self._unread = bool(self.headers.get("content-length", "0").strip("0"))
        path = self.path.partition("?")[0]
        caller = self.server.hermes.caller(self.headers.get("authorization"))
        if path.startswith("/api/talaria/"):
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply = self.server.router.dispatch(method, path, headers, self._read, lambda: caller)
            self._send(*(reply or (404, {"error": "Not found"})))
            return
        if caller is None:
            self._send(401, {"error": "Not authorized."})
            return
        try:
            self._send(200, self._app(method, path, caller))
        except NotFound:
            self._send(404, {"error": "Session not found"})
        except (KeyError, ValueError, Answer):
            self._send(400, {"error": "Invalid request"})

    def _app(self, method: str, path: str, caller: Caller) -> dict[str, Any]:
        hermes = self.server.hermes
        if (method, path) == ("POST", "/api/sessions"):
            return hermes.create(caller, self._json())
        if method == "POST" and (turn := TURN.match(path)):
            act = hermes.end_turn if turn.group(2) else hermes.start_turn
            return act(turn.group(1), self._json())
        if method == "DELETE" and (session := SESSION.match(path)):
            return hermes.delete(session.group(1))
        raise NotFound(path)

    def _json(self) -> Mapping[str, Any]:
        body = json.loads(self._read(MAX_APP_BODY))
        if not isinstance(body, dict):
            raise ValueError("not an object")  # noqa: TRY004 - a client's 400, as bad JSON
        return body

    def _read(self, limit: int) -> bytes:
        """The body by its Content-Length (the route checked it against `limit`)."""
        size = int(self.headers.get("content-length") or 0)
        if size > limit:
            raise Answer(413, "Request body too large")
        body = self.rfile.read(size)
        self._unread = False
        if len(body) < size:
            raise Answer(400, "Request body incomplete")
        return body

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = encode(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self._unread:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)


def make_server(
    relay: ThreadedRelayService, sessions: Sessions, port: int = 0, host: str = "127.0.0.1"
) -> WebServer:
    """The app on `host:port` (0: a free port); run it with `serve_forever()`."""
    return WebServer((host, port), Hermes(relay, sessions, TOKENS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8788)
    args = parser.parse_args()
    sessions = Sessions()
    with relay_from_env(sessions) as relay:  # starts it; stops it on the way out
        server = make_server(relay, sessions, args.port)
        print(f"serving on http://127.0.0.1:{server.server_address[1]}", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()


if __name__ == "__main__":
    main()
