"""The host application's own tables: what its Alembic chain (`a1`) creates."""

from __future__ import annotations

from sqlalchemy import Column, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

notes = Table(
    "host_notes",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("author", String(64), nullable=False),
    Column("body", Text, nullable=False),
    Index("ix_host_notes_author", "author"),
)
