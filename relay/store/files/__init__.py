"""`FileStore`: relay state as JSON files in the legacy layout of the Python original."""

from relay.store.files.store import FileStore

__all__ = ["FileStore"]
