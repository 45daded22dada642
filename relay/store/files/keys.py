"""Publisher keys in the state dir: `talaria-relay-publisher-<16 hex>.pem`, 0600, as before."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from relay.errors import CorruptStateError
from relay.store.files.documents import CONFIG, _parse_config
from relay.store.files.io import _fsync_dir, _read, _write
from relay.store.files.locked import LockedDir

# What `save_key` names a key file; `load_key` reads no other file.
KEY_FILE = re.compile(r"talaria-relay-publisher-[0-9a-f]{16}\.pem")


class KeyFiles(LockedDir):
    """The key hooks of `StoreGate` on the state dir."""

    async def _save_key(self, key_id: str, pem: str) -> str:
        digest = hashlib.sha256(key_id.encode()).hexdigest()[:16]
        path = self._dir / f"talaria-relay-publisher-{digest}.pem"

        def work() -> str:
            with self._locked(exclusive=True):
                _write(path, pem)
            return str(path)

        return await self._call(work)

    async def _load_key(self, ref: str) -> str | None:
        def work() -> bytes | None:
            with self._locked(exclusive=False):
                path = self._key_path(ref)
                return None if path is None else _read(path)

        raw = await self._call(work)
        try:
            return None if raw is None else raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptStateError(f"Talaria publisher key {ref!r} is not text") from None

    def _key_path(self, ref: str) -> Path | None:
        """The key file of this store that `ref` names.

        Only ever a key file inside the store, and never through a link: a legacy config names
        the key by its absolute path, and its namesake here keeps a moved state dir working.
        """
        name = ref.replace("\\", "/").rsplit("/", 1)[-1]
        path = self._dir / name
        if KEY_FILE.fullmatch(name) is None or path.is_symlink() or not path.is_file():
            return None
        return path

    async def _delete_key(self, ref: str) -> bool:
        def work() -> bool:
            with self._locked(exclusive=True):
                path = self._key_path(ref)
                if path is None or self._named_key() == path:
                    return False
                path.unlink()
                _fsync_dir(self._dir)
                return True

        return await self._call(work)

    def _named_key(self) -> Path | None:
        """The key file the stored registration names, if any can be read."""
        raw = _read(self._dir / CONFIG)
        try:
            config = None if raw is None else _parse_config(raw, 0)
        except CorruptStateError:
            return None
        return None if config is None else self._key_path(config.key_ref)
