"""`manage.py relay_migrate`: the relay's migrations to head, as a step of the app's deploy."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from relay.store.hosting import migrate


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped
    help = "Migrate the relay's schema in the app's database to this release's head."

    def handle(self, *args: Any, **options: Any) -> None:
        applied = migrate(settings.RELAY_STORE_URL)
        self.stdout.write(f"relay: applied {', '.join(applied)}" if applied else "relay: at head")
