"""What runs the SQL store's statements: the `Runner` port, SQLite on a thread of the store's own,
Postgres on asyncpg, and the Postgres-only rules the URL parser shares (`hosts`, `budget`); also
the SQLAlchemy engines Alembic migrates through (`engines`). Nothing here imports the URL parser.
"""
