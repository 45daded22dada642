"""Registration on SQL: the relay config and its profile map, publisher keys, identities."""

from __future__ import annotations

import functools
import hashlib
import time
from typing import Any

from sqlalchemy import bindparam, delete, exists, select, true, update

from relay.errors import InvalidInputError, StaleConfigError
from relay.store.backend import Rekeyed
from relay.store.keys import pkcs8
from relay.store.records import CONFIG_VERSION, ProfileGrant, RelayConfig
from relay.store.sql import schema as t
from relay.store.sql.dialect import Dialect, bind
from relay.store.sql.drivers.runner import Call, Runner, Tx, first, scalar


def _params(*names: str) -> dict[str, Any]:
    return {name: bindparam(name) for name in names}


@functools.cache
class Statements:
    def __init__(self, d: Dialect) -> None:
        c, k, i = t.config.c, t.keys.c, t.identities.c
        fields = ("url", "publisher_id", "key_id", "key_ref", "version", "updated_at")
        config_values = {name: bind(c[name]) for name in fields}
        upsert_config = d.insert(t.config).values(id=1, generation=1, **config_values)
        upsert_key = d.insert(t.keys).values(_params("ref", "pem", "encrypted"))
        by_ref = k.ref == bind(k.ref)
        tombstone = {
            **{name: "" for name in ("url", "publisher_id", "key_id", "key_ref")},
            "version": 0,
            "generation": c.generation + 1,
            "updated_at": bind(c.updated_at),
        }
        mint = d.insert(t.identities).values(
            profile=bindparam("profile"), identity=bindparam("minted")
        )
        by_profile = i.profile == bind(i.profile)
        # One statement, so a concurrent save is seen whole or not at all (Postgres reads each
        # statement of a READ COMMITTED transaction at its own snapshot).
        self.load_config = d.compile(
            select(*(c[name] for name in (*fields[:5], "generation")), *t.profiles.c).select_from(
                t.config.outerjoin(t.profiles, true())
            )
        )
        self.key_exists = d.compile(select(k.ref).where(by_ref))
        self.stored_generation = d.compile(select(c.version, c.generation))
        # Locks the singleton row first, so concurrent saves replace the profile map in turn.
        self.upsert_config = d.compile(
            upsert_config.on_conflict_do_update(
                index_elements=[c.id],
                set_={**config_values, "generation": c.generation + 1},
            ).returning(c.generation)
        )
        # Forgetting keeps the row as a tombstone of no version: `load_config` shows none, a key
        # is named by nothing, and the generation keeps rising, so no later registration has
        # the one a replica may still hold.
        self.forget_config = d.compile(update(t.config).values(tombstone))
        self.forget_config_at = d.compile(
            update(t.config)
            .where(c.version == CONFIG_VERSION, c.generation == bind(c.generation))
            .values(tombstone)
        )
        self.clear_profiles = d.compile(delete(t.profiles))
        self.insert_profile = d.compile(
            t.profiles.insert().values(_params("profile", "identity", "profile_id"))
        )
        self.upsert_key = d.compile(
            upsert_key.on_conflict_do_update(
                index_elements=[k.ref],
                set_={"pem": upsert_key.excluded.pem, "encrypted": upsert_key.excluded.encrypted},
            )
        )
        self.load_key = d.compile(select(k.pem).where(by_ref))
        # FOR UPDATE on Postgres; on SQLite the write transaction (BEGIN IMMEDIATE) excludes.
        self.all_keys = d.compile(select(k.ref, k.pem).order_by(k.ref).with_for_update())
        self.rekey = d.compile(update(t.keys).where(by_ref).values(_params("pem", "encrypted")))
        # A key the registration names is never deleted, whoever asks.
        self.delete_key = d.compile(
            delete(t.keys).where(by_ref, ~exists().where(c.key_ref == k.ref))
        )
        self.identity = d.compile(select(i.identity).where(by_profile))
        self.mint_identity = d.compile(mint.on_conflict_do_nothing(index_elements=[i.profile]))
        self.forget_identity = d.compile(delete(t.identities).where(by_profile))
        self.identities = d.compile(select(i.profile, i.identity))


async def load_config(db: Runner) -> RelayConfig | None:
    q = Statements(db.dialect).load_config
    rows = await db.read(lambda tx: tx.rows(q))
    if not rows or rows[0][4] != CONFIG_VERSION:
        return None
    url, publisher_id, key_id, key_ref, _, generation = rows[0][:6]
    grants = {r[6]: ProfileGrant(r[7], r[8]) for r in rows if r[6] is not None}
    return RelayConfig(url, publisher_id, key_id, key_ref, grants, generation)


async def save_config(db: Runner, config: RelayConfig, expected_generation: int | None) -> None:
    q = Statements(db.dialect)
    values = {name: getattr(config, name) for name in ("url", "publisher_id", "key_id", "key_ref")}
    values |= {"version": CONFIG_VERSION, "updated_at": int(time.time() * 1000)}
    grants = [
        {"profile": name, "identity": grant.identity, "profile_id": grant.profile_id}
        for name, grant in config.profiles.items()
    ]

    async def body(tx: Tx) -> None:
        if await first(tx, q.key_exists, {"ref": config.key_ref}) is None:
            raise InvalidInputError(f"publisher key {config.key_ref!r} is not saved")
        stored = await first(tx, q.stored_generation)
        # What `load_config` shows: a registration of another version counts as none.
        shown = stored[1] if stored and stored[0] == CONFIG_VERSION else 0
        generation = await scalar(tx, q.upsert_config, values)
        # A save that committed between our read and our upsert shows in the generation.
        raced = generation != (stored[1] if stored else 0) + 1
        if expected_generation is not None and (raced or shown != expected_generation):
            raise StaleConfigError("the relay registration changed since it was read")
        await tx.run(q.clear_profiles)
        await tx.many(q.insert_profile, grants)

    await db.write(body)


async def forget_config(db: Runner, expected_generation: int | None) -> None:
    q = Statements(db.dialect)
    now = {"updated_at": int(time.time() * 1000)}

    async def body(tx: Tx) -> None:
        if expected_generation is None:
            await tx.run(q.forget_config, now)
        elif expected_generation == 0:
            # "None is stored": then there is nothing to forget, else it was raced.
            stored = await first(tx, q.stored_generation)
            if stored and stored[0] == CONFIG_VERSION:
                raise StaleConfigError("the relay registration changed since it was read")
            return
        elif not await tx.run(q.forget_config_at, {**now, "generation": expected_generation}):
            raise StaleConfigError("the relay registration changed since it was read")
        await tx.run(q.clear_profiles)

    await db.write(body)


async def save_key(db: Runner, key_id: str, pem: str) -> str:
    ref = hashlib.sha256(key_id.encode()).hexdigest()[:16]
    q = Statements(db.dialect).upsert_key
    params = {"ref": ref, "pem": pem, "encrypted": pkcs8.is_encrypted(pem)}
    await db.write(lambda tx: tx.run(q, params), single=True)
    return ref


async def load_key(db: Runner, ref: str) -> str | None:
    q = Statements(db.dialect).load_key
    # The PEM says whether it is encrypted; the column mirrors it for queries.
    return await db.read(lambda tx: scalar(tx, q, {"ref": ref}))


async def rekey(db: Runner, rekeyed: Rekeyed) -> int:
    q = Statements(db.dialect)

    async def body(tx: Tx) -> int:
        rows = await tx.rows(q.all_keys)
        # Every key is rekeyed before any is written: one that fails rolls all of it back.
        pems = [(ref, rekeyed(ref, pem)) for ref, pem in rows]
        changes = [{"ref": r, "pem": p, "encrypted": pkcs8.is_encrypted(p)} for r, p in pems]
        if changes:
            await tx.many(q.rekey, changes)
        return len(changes)

    return await db.write(body)


async def delete_key(db: Runner, ref: str) -> bool:
    q = Statements(db.dialect).delete_key
    return bool(await db.write(lambda tx: tx.run(q, {"ref": ref}), single=True))


def identity_step(d: Dialect, profile: str) -> Call:
    return Statements(d).identity, {"profile": profile}


async def profile_identity(db: Runner, profile: str) -> str | None:
    step = identity_step(db.dialect, profile)
    return await db.read(lambda tx: scalar(tx, *step))


async def mint_identity(db: Runner, profile: str, minted: str) -> str:
    q = Statements(db.dialect)

    async def body(tx: Tx) -> str:
        # The loser of a race inserts nothing and reads the winner's value.
        await tx.run(q.mint_identity, {"profile": profile, "minted": minted})
        return await scalar(tx, q.identity, {"profile": profile})  # type: ignore[no-any-return]

    return await db.write(body)


async def forget_identity(db: Runner, profile: str) -> None:
    q = Statements(db.dialect).forget_identity
    await db.write(lambda tx: tx.run(q, {"profile": profile}), single=True)


async def identities(db: Runner) -> dict[str, str]:
    q = Statements(db.dialect).identities
    return {row[0]: row[1] for row in await db.read(lambda tx: tx.rows(q))}
