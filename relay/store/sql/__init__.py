"""The store's `Backend` on SQL (`backend.SqlBackend`): SQLite (embedded) and Postgres (replicas),
a module of statements per aggregate, run on the raw drivers of `drivers/`. Nothing is imported
here, so `relay.store.url` can use the Postgres modules without loading the backend.
"""
