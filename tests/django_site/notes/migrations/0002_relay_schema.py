"""The relay's schema, migrated from the app's own deploy (`manage.py migrate`).

Not atomic: the relay migrates on its own connection, in its own transaction (on SQLite a write
transaction Django held open here would keep it waiting). Reversing it leaves the relay as it is:
its tables are the relay's to take down (`talaria-relay migrate --to base`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.db import migrations

from relay.store.hosting import migrate


def relay_schema(apps: Any, schema_editor: Any) -> None:
    migrate(settings.RELAY_STORE_URL)


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    atomic = False
    dependencies: ClassVar[list[tuple[str, str]]] = [("notes", "0001_initial")]
    operations: ClassVar[list[Any]] = [
        migrations.RunPython(relay_schema, migrations.RunPython.noop),
    ]
