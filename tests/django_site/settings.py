"""The least a Django project needs to serve views: no database, no installed apps."""

SECRET_KEY = "django-site-for-tests-only"  # noqa: S105 - a test project, never deployed
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "django_site.urls"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict[str, object] = {}
USE_TZ = True
