"""The least a Django project needs to serve views: no database, no installed apps.

With `DJANGO_SITE_DATABASE_URL` (a relay store URL: `sqlite:///PATH` or `postgresql://…`), a
database too, shared with the relay, and the `notes` app whose migrations run the relay's
(tests/acceptance/test_django_database.py).
"""

import os

SECRET_KEY = "django-site-for-tests-only"  # noqa: S105 - a test project, never deployed
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "django_site.urls"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict[str, object] = {}

# The relay's store: the app's own database (docs/in-your-database.md).
RELAY_STORE_URL = os.environ.get("DJANGO_SITE_DATABASE_URL")
if RELAY_STORE_URL:
    from django_site.database import django_database

    DATABASES = {"default": django_database(RELAY_STORE_URL)}
    INSTALLED_APPS = ["django_site.notes"]
USE_TZ = True
