"""The app's own views: sessions and turns, each followed by the relay call the README asks for."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from django_site.site import Relay, Wired, caller

View = Callable[..., HttpResponse]


def _guarded(view: Callable[..., HttpResponse]) -> View:
    def handle(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        if caller(request.headers.get("authorization")) is None:
            return JsonResponse({"error": "Not authorized."}, status=401)
        return view(request, **kwargs)

    return handle


def _relay() -> Relay:
    assert Wired.relay is not None, "the test wires a relay in before serving"
    return Wired.relay


def _body(request: HttpRequest) -> dict[str, Any]:
    found = json.loads(request.body or b"{}")
    return found if isinstance(found, dict) else {}


def _create(request: HttpRequest) -> HttpResponse:
    found = caller(request.headers.get("authorization"))
    assert found is not None
    body = _body(request)
    Wired.sessions.create(str(body["id"]), found.profile, str(body["title"]))
    _relay().changed()
    return JsonResponse({"ok": True})


def _turn(request: HttpRequest, session_id: str) -> HttpResponse:
    try:
        Wired.sessions.start_run(session_id, str(_body(request)["stream_id"]))
    except KeyError:
        return JsonResponse({"error": "Session not found"}, status=404)
    _relay().changed()
    return JsonResponse({"ok": True})


def _end(request: HttpRequest, session_id: str) -> HttpResponse:
    body = _body(request)
    stream_id, phase = str(body["stream_id"]), str(body.get("phase", "completed"))
    _relay().note_terminal(stream_id, phase)  # before the run is gone
    Wired.sessions.end_run(stream_id)
    _relay().changed()
    return JsonResponse({"ok": True})


def _session(request: HttpRequest, session_id: str) -> HttpResponse:
    if request.method != "DELETE":
        return JsonResponse({"error": "Method not allowed"}, status=405)
    try:
        session = Wired.sessions.delete(session_id)
    except KeyError:
        return JsonResponse({"error": "Session not found"}, status=404)
    _relay().clear_deleted(session_id, session.profile)  # before reporting success
    return JsonResponse({"ok": True})


create = _guarded(_create)
turn = _guarded(_turn)
end = _guarded(_end)
session = _guarded(_session)
