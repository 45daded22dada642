"""This release's version; a leaf, so the store records it without importing `relay` itself."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("talaria-relay")
except PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
