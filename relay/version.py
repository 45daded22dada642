"""This release's version; a leaf module, so the store can import it without a cycle."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("talaria-relay")
except PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
