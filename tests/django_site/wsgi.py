"""The project's WSGI application with the relay routes and the operator page in front of it,
as the README mounts them: `relay.wsgi.middleware` around Django's handler."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.wsgi import get_wsgi_application

from django_site.site import caller, is_operator
from relay.routes import Caller
from relay.threaded import ThreadedRelayService
from relay.wsgi import Router, middleware

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment
else:
    WSGIEnvironment = Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_site.settings")


def identify(environ: WSGIEnvironment) -> Caller | None:
    return caller(environ.get("HTTP_AUTHORIZATION"))


def application(source: Callable[[], ThreadedRelayService | None]) -> Router:
    """Django behind the relay routes; `source` hands out the started service."""
    return middleware(get_wsgi_application(), source, identify, operator=is_operator)
