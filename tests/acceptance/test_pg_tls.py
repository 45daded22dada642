"""The store over TLS with a certificate from a private CA: verified, or refused in one line."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from cli_support import run
from databases import admin_execute
from pgcluster import SUPERUSER
from pgtls import MISMATCH_HOST, TlsCluster

from relay.store import open_store, resolve
from relay.store.sql.migrate import upgrade

pytest_plugins = ["pgdeploy"]
pytestmark = pytest.mark.postgres


async def test_verify_full_migrates_and_every_connection_is_tls(tls_cluster: TlsCluster) -> None:
    """With `sslmode=verify-full&sslrootcert=CA` the store migrates and works, and every
    connection it holds is TLS, as the server's `pg_stat_ssl` sees it."""
    database = f"relay_{uuid.uuid4().hex[:12]}"
    await admin_execute(tls_cluster.cluster.url(), f'CREATE DATABASE "{database}"')
    url = tls_cluster.url(database)
    await upgrade(resolve(url))
    async with open_store(url) as store:
        identity = await store.profile_identity("default")
        assert await store.profile_identity("default") == identity
        rows = tls_cluster.cluster.sql(
            "SELECT s.ssl, s.version FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)"
            f" WHERE a.datname = '{database}' AND a.usename = '{SUPERUSER}'"
        ).split()
    assert rows, "the store holds no connection"
    assert all(row.startswith("t|TLSv1.") for row in rows), rows


@pytest.mark.parametrize(
    ("failure", "command"), [("name-mismatch", "check"), ("wrong-ca", "status")]
)
def test_a_certificate_that_fails_verification_is_unreachable_in_one_line(
    failure: str, command: str, tls_cluster: TlsCluster, tmp_path: Path
) -> None:
    """A server reached by a name its certificate does not hold, or trusted through the wrong
    CA, fails closed: `check` or `status` exits 3 with one line saying the certificate failed."""
    if failure == "name-mismatch":
        url, cause = tls_cluster.url(host=MISMATCH_HOST), "mismatch"
    else:
        url, cause = tls_cluster.url(ca=tls_cluster.wrong_ca), "unable to get local issuer"
    result = run(tmp_path, command, "--store", url, timeout=60)
    lines = result.output.strip().splitlines()
    assert (result.code, len(lines)) == (3, 1), result.describe()
    assert "certificate verify failed" in lines[0], result.describe()
    assert cause in lines[0], result.describe()
