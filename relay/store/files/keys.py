"""Publisher keys in the state dir: `talaria-relay-publisher-<16 hex>.pem`, 0600, as before."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from relay.errors import CorruptStateError
from relay.store.files.documents import CONFIG, _parse_config
from relay.store.files.io import _fsync_dir, _read, _write, _write_all
from relay.store.files.locked import LockedDir
from relay.store.keys.gate import Rekeyed

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
        def work() -> str | None:
            with self._locked(exclusive=False):
                path = self._key_path(ref)
                return None if path is None else _text(path, ref)

        return await self._call(work)

    async def _rekey(self, rekeyed: Rekeyed) -> int:
        def work() -> int:
            with self._locked(exclusive=True):
                paths = sorted(p for p in self._dir.iterdir() if self._key_path(p.name) == p)
                # Every key is rekeyed before any file is written: one that fails changes none.
                # (Files are renamed one by one: a crash in between leaves some keys under the
                # new passphrase, and the same rekey run again finishes the rest.)
                stored = {p: pem for p in paths if (pem := _text(p, str(p))) is not None}
                texts = {path: rekeyed(str(path), pem) for path, pem in stored.items()}
                _write_all({path: text for path, text in texts.items() if text != stored[path]})
                return len(stored)

        return await self._call(work)

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


def _text(path: Path, ref: str) -> str | None:
    raw = _read(path)
    try:
        return None if raw is None else raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptStateError(f"Talaria publisher key {ref!r} is not text") from None
