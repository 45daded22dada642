"""What runs the SQL store's statements: the `Runner` port, SQLite on a thread of the store's own,
Postgres on asyncpg, and the SQLAlchemy engines Alembic migrates through (`engines`). Nothing here
imports the URL parser (`store/url.py`); the Postgres rules it shares stand beside it."""
