"""A host application with its own SQLAlchemy models and Alembic chain, sharing its database
with the relay (tests/acceptance/test_host_app.py)."""
