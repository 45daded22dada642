"""The store's `Backend` on SQL: SQLite (embedded) and Postgres (replicas), on their raw drivers.

`backend.SqlBackend` implements the hooks with one function per hook in each aggregate's module
(`registration`, `revisions`, `ledger`, `outbox`, `presence`, `runs`, `passes`, `transfer`, which
hold the statements; `relay.store.testing_hooks` hands them to the bench's raw side);
`drivers/` holds what runs them (the runner port, SQLite's writer thread, asyncpg's pool and the
batch function, and the Postgres-only URL, budget and SQLSTATE rules). Nothing is imported here,
so `relay.store.url` can use the Postgres modules without loading the backend.
"""
