"""Whether the file system can name a file store's path: checked when its URL is parsed."""

from __future__ import annotations

import os
from pathlib import Path

from relay.errors import InvalidInputError


def usable(kind: str, path: Path) -> Path:
    """`path` if the file system can name it (no component or whole path over its limits): a
    name too long is bad input at once, not an `OSError` once the first directory is made."""
    ancestor = next((p for p in (path, *path.parents) if os.path.exists(p)), Path("/"))
    name_max, path_max = _limit(ancestor, "PC_NAME_MAX", 255), _limit(ancestor, "PC_PATH_MAX", 4096)
    if len(os.fsencode(path)) >= path_max:
        raise InvalidInputError(f"{kind} is longer than the file system allows ({path_max} bytes)")
    if any(len(os.fsencode(part)) > name_max for part in path.parts):
        raise InvalidInputError(
            f"{kind} has a name longer than the file system allows ({name_max} bytes)"
        )
    try:
        path.stat()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise InvalidInputError(f"{kind} {path} cannot be used: {exc.strerror}") from None
    return path


def _limit(path: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(path, name)
    except (OSError, ValueError):
        return default
