"""This release's version, read once from the installed distribution.

A leaf: `relay` re-exports it, and the store records it (fleet rows, the compatibility record)
without importing the package's top.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("talaria-relay")
except PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
