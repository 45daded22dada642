"""The app's own model: Django's tables beside the relay's."""

from __future__ import annotations

from django.db import models


class Note(models.Model):  # type: ignore[misc]  # Django is untyped
    author = models.CharField(max_length=64, db_index=True)
    body = models.TextField()
