"""Fixtures for Postgres as it is deployed: PgBouncer, TLS, extra clusters, a failover pair.

A test module takes them with `pytest_plugins = ["pgdeploy"]`. Each component is made the first
time a test asks for it and shared by the session (a cluster costs seconds), except a failover
pair, which a test destroys. What the machine lacks skips, except under CI, where it fails
(`pgcluster.require`), as the Postgres tests of conftest do.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from pgbouncer_proc import Bouncers
from pgcluster import (
    TOOLS,
    FailoverPair,
    PgCluster,
    create_cluster,
    drop_all,
    free_port,
    new_cluster,
    require,
    start_standby,
)
from pgtls import TlsCluster, create_tls_cluster


@pytest.fixture(scope="session")
def bouncers(pg_admin_url: str) -> Iterator[Bouncers]:
    """PgBouncer by pool mode, in front of the test server (127.0.0.1:5432)."""
    require("pgbouncer")
    running = Bouncers()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def extra_cluster() -> Iterator[PgCluster]:
    """A cluster of the tests' own, whose settings a test may change (and must restore)."""
    require(*TOOLS, root=True)
    cluster = create_cluster()
    yield cluster
    drop_all([cluster])


@pytest.fixture(scope="session")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    """A cluster with ssl=on and a certificate from a private CA made for this run."""
    require(*TOOLS, "openssl", root=True)
    made = create_tls_cluster(tmp_path_factory.mktemp("tls"))
    yield made
    drop_all([made.cluster])


@pytest.fixture
def failover_pair() -> Iterator[FailoverPair]:
    """A fresh primary and standby (a failover test uses them up), dropped after."""
    require(*TOOLS, root=True)
    port = free_port(("127.0.0.2", "127.0.0.3"))
    with ThreadPoolExecutor(2) as pool:  # two initdb runs at once
        making = [
            pool.submit(create_cluster, ("127.0.0.2",), port=port),
            pool.submit(new_cluster, ("127.0.0.3",), port=port),
        ]
    made = [future.result() for future in making if future.exception() is None]
    try:
        for future in making:
            future.result()
        primary, standby = made
        start_standby(primary, standby)
        yield FailoverPair(primary, standby)
    finally:
        drop_all(made)
