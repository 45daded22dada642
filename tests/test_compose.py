"""docker-compose.yml is checked statically: Docker does not run where the tests do."""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path
from typing import Any

import yaml

from relay.store.url import resolve

COMPOSE = Path(__file__).resolve().parents[1] / "docker-compose.yml"


def _services() -> dict[str, Any]:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert isinstance(services, dict)
    return services


def test_postgres_service_is_15_with_a_healthcheck() -> None:
    """The database is Postgres 15 and says when it is ready."""
    postgres = _services()["postgres"]
    assert postgres["image"].startswith("postgres:15")
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])


def test_migrate_runs_once_against_the_healthy_database() -> None:
    """`migrate` waits for a healthy Postgres, runs a module that exists, on that database's URL."""
    services = _services()
    migrate = services["migrate"]
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert migrate["restart"] == "no"
    words = shlex.split(migrate["command"][-1])
    module = words[words.index("-m") + 1]
    assert importlib.util.find_spec(module) is not None
    target = resolve(migrate["environment"]["TALARIA_RELAY_STORE_URL"])
    assert target.backend == "postgres"
    assert target.url is not None
    assert target.url.host == "postgres"
    env = services["postgres"]["environment"]
    assert (target.url.username, target.url.password, target.url.database) == (
        env["POSTGRES_USER"],
        env["POSTGRES_PASSWORD"],
        env["POSTGRES_DB"],
    )
