"""What runs the SQL store's statements: the `Runner` port and its two drivers.

SQLite: `sqlite` (a writer thread of the store's own, `worker`). Postgres: `postgres` on asyncpg
(`pgpool`, the `relay_batch` call in `pgbatch`), the Postgres-only rules it and the URL parser
share: multi-host URLs (`hosts`), the connection budget (`budget`); what a SQLSTATE means, and a
driver's error as the store's (`sqlstate`). `engines`: the SQLAlchemy engines Alembic migrates
through. Nothing here imports the URL parser.
"""
