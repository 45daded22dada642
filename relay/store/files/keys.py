"""Publisher keys in the state dir: `talaria-relay-publisher-<16 hex>.pem`, 0600, as before."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from relay.store.files.io import read
from relay.store.rules.documents import Keys

# What `save_key` names a key file; `load_key` reads no other file.
KEY_FILE = re.compile(r"talaria-relay-publisher-[0-9a-f]{16}\.pem")


def key_path(directory: Path, key_id: str) -> Path:
    digest = hashlib.sha256(key_id.encode()).hexdigest()[:16]
    return directory / f"talaria-relay-publisher-{digest}.pem"


def named(directory: Path, ref: str) -> str | None:
    """Where in `directory` the key `ref` names would be.

    Only ever a key file inside the store: a legacy config names the key by its absolute path,
    and its namesake here keeps a moved state dir working.
    """
    name = ref.replace("\\", "/").rsplit("/", 1)[-1]
    return None if KEY_FILE.fullmatch(name) is None else str(directory / name)


def key_files(directory: Path) -> Keys:
    """Every key file of `directory` by its path, never through a link; None for one not text."""
    keys: Keys = {}
    for path in sorted(directory.iterdir()):
        if KEY_FILE.fullmatch(path.name) is None or path.is_symlink() or not path.is_file():
            continue
        raw = read(path)
        if raw is None:
            continue
        try:
            keys[str(path)] = raw.decode("utf-8")
        except UnicodeDecodeError:
            keys[str(path)] = None
    return keys
