"""A relay store URL as Django's `DATABASES` entry: one connection string for both."""

from __future__ import annotations

from sqlalchemy import make_url


def django_database(url: str) -> dict[str, object]:
    """Django's settings for the SQLite file or Postgres database a store URL names."""
    parsed = make_url(url)
    if parsed.drivername.startswith("sqlite"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parsed.database}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parsed.database,
        "USER": parsed.username or "",
        "PASSWORD": parsed.password or "",
        "HOST": parsed.host or "",
        "PORT": str(parsed.port or ""),
    }
