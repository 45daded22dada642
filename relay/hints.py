"""A fix-it hint's command, to paste as it stands: every message that names a command names the
store in question, quoted for a shell, with any password hidden and the hint saying so."""

from __future__ import annotations


def command(args: str, store: str | None) -> str:
    """`talaria-relay ARGS --store 'URL'`, in backticks, for a store URL as its display shows it
    (`***` for a password); no `--store` for None (the embedded default)."""
    if not store:
        return f"`talaria-relay {args}`"
    quoted = "'" + store.replace("'", "'\\''") + "'"
    hint = f"`talaria-relay {args} --store {quoted}`"
    if ":***@" in store:
        hint += " (with the store's password in place of ***)"
    return hint
