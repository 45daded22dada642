"""A Flask app publishing to Talaria Relay: the relay routes as WSGI middleware in front of it.

    TALARIA_RELAY_STORE_URL=postgresql://relay@db/relay \\
        gunicorn -w 2 -k gthread 'examples.flask_app:from_env()'

Its own routes are the same as the `http.server` example's (`examples.hermes.Hermes`); the relay's
are `relay.wsgi.middleware` around `app.wsgi_app`, with the app's auth as `identify`. With
`--preload`, the master makes and starts the relay service, and each worker (a forked child)
gets a service of its own on its first call (docs/web-hosts.md, "Flask and other WSGI apps").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue

from examples.hermes import TOKENS, Hermes, NotFound, Sessions, relay_from_env
from relay.routes import Caller
from relay.threaded import ThreadedRelayService
from relay.wsgi import middleware

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment
else:
    WSGIEnvironment = Any


def create_app(relay: ThreadedRelayService, sessions: Sessions) -> Flask:
    hermes = Hermes(relay, sessions, TOKENS)
    app = Flask(__name__)

    def identify(environ: WSGIEnvironment) -> Caller | None:
        return hermes.caller(environ.get("HTTP_AUTHORIZATION"))

    def caller() -> Caller:
        found = hermes.caller(request.headers.get("authorization"))
        if found is None:
            raise PermissionError
        return found

    @app.errorhandler(NotFound)
    def not_found(_: Exception) -> ResponseReturnValue:
        return jsonify(error="Session not found"), 404

    @app.errorhandler(PermissionError)
    def refused(_: Exception) -> ResponseReturnValue:
        return jsonify(error="Not authorized."), 401

    @app.post("/api/sessions")
    def create() -> ResponseReturnValue:
        return hermes.create(caller(), request.get_json())

    @app.post("/api/sessions/<session_id>/turn")
    def start_turn(session_id: str) -> ResponseReturnValue:
        caller()
        return hermes.start_turn(session_id, request.get_json())

    @app.post("/api/sessions/<session_id>/turn/end")
    def end_turn(session_id: str) -> ResponseReturnValue:
        caller()
        return hermes.end_turn(session_id, request.get_json())

    @app.delete("/api/sessions/<session_id>")
    def delete(session_id: str) -> ResponseReturnValue:
        caller()
        return hermes.delete(session_id)

    app.wsgi_app = middleware(app.wsgi_app, relay, identify)  # type: ignore[method-assign]
    app.extensions["relay"] = relay
    return app


def from_env() -> Flask:
    """The app as gunicorn loads it: the relay service configured by the environment, started."""
    sessions = Sessions()
    relay = relay_from_env(sessions)
    relay.start()  # a forked worker starts its own again (relay.threaded's fork rule)
    return create_app(relay, sessions)
