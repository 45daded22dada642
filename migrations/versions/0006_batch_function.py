"""Postgres: `relay_batch`, a function that runs a write batch's statements in one call.

A store writes a batch of straight-line statements as one `SELECT * FROM relay_batch(…)` in
autocommit: one round trip and one transaction, whatever the number of statements
(`relay/store/sql/drivers/pgbatch.py`). SECURITY INVOKER: it runs each statement with the caller's
own privileges, so it lets no role do more than it could by sending the statements itself. Values
are bound with `EXECUTE … USING`, never spliced into the SQL text. SQLite gets nothing (its
batches cost no round trips). A store on a database still at 0005 runs its batches as
transactions of their statements.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A new function only; 0005 code never calls it.
kind = "expand"

SIGNATURE = "relay_batch(text[], text[], text[], text[], boolean, text[])"

# statements: each step's SQL, its parameters read from one text array as `($1[n]::TYPE)`;
# runs: how many parameter sets each step runs with (0 runs it not at all); widths: how many
# parameters each takes; args: every parameter value as text, step by step, set by set; answer:
# return the last step's rows (one JSON object each, columns in order); settings: (name, value)
# pairs set for this transaction only before the first step. Every array is text[], counts too:
# the one array type asyncpg encodes without first asking the server about it (its question
# costs round trips, and changes a session setting, `jit`, for a while: not through PgBouncer).
CREATE = """
CREATE FUNCTION relay_batch(
    statements text[], runs text[], widths text[], args text[], answer boolean, settings text[]
)
RETURNS SETOF json
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $relay_batch$
DECLARE
    steps integer := coalesce(cardinality(statements), 0);
    used integer := 0;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(settings), 0) / 2 LOOP
        PERFORM set_config(settings[2 * i - 1], settings[2 * i], true);
    END LOOP;
    FOR i IN 1 .. steps LOOP
        FOR j IN 1 .. runs[i]::integer LOOP
            IF i = steps AND answer THEN
                RETURN QUERY EXECUTE
                    'WITH r AS MATERIALIZED (' || statements[i] || ') SELECT row_to_json(r) FROM r'
                    USING args[used + 1 : used + widths[i]::integer];
            ELSE
                EXECUTE statements[i] USING args[used + 1 : used + widths[i]::integer];
            END IF;
            used := used + widths[i]::integer;
        END LOOP;
    END LOOP;
END
$relay_batch$
"""


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(CREATE)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")
