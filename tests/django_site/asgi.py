"""The project's ASGI application with the relay routes and the operator page in front of it:
paths under `/api/talaria/` go to `relay.asgi`'s routes, every other one to Django."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from django.core.asgi import get_asgi_application
from starlette.applications import Starlette
from starlette.requests import Request

from django_site.site import caller, is_operator
from relay.asgi import routes
from relay.routes import Caller
from relay.service import RelayService

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_site.settings")

PREFIX = "/api/talaria"
Scope = dict[str, Any]
Asgi = Callable[[Scope, Any, Any], Any]


async def identify(request: Request) -> Caller | None:
    return caller(request.headers.get("authorization"))


def application(source: Callable[[], RelayService | None]) -> Asgi:
    """Django behind the relay routes; `source` hands out the started service."""
    django = get_asgi_application()
    relay = Starlette(routes=routes(source, identify, prefix=PREFIX, operator=is_operator))

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        # Django serves HTTP only: the server's lifespan messages go to Starlette.
        if scope["type"] == "lifespan" or scope["path"].startswith(PREFIX + "/"):
            await relay(scope, receive, send)
        else:
            await django(scope, receive, send)

    return app
