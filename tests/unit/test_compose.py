"""docker-compose.yml is checked statically: Docker does not run where the tests do."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay.cli.demo import replica_parser
from relay.cli.main import parser
from relay.store.url import resolve

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


def services() -> dict[str, Any]:
    found = yaml.safe_load(COMPOSE.read_text())["services"]
    assert isinstance(found, dict)
    return found


def relay_command(service: dict[str, Any]) -> list[str]:
    """The relay command a service runs, after its `pip install … &&`."""
    script = service["command"][-1]
    return shlex.split(script.split("&&")[-1].replace("$$", "$"))


RELAY_SERVICES = [name for name, s in services().items() if s.get("image", "").startswith("python")]


def test_every_service_has_an_image_and_its_dependencies_exist() -> None:
    """Each service names an image; each dependency and shared network is a real service."""
    every = services()
    for name, service in every.items():
        assert "image" in service or "build" in service, name
        for dependency, rule in service.get("depends_on", {}).items():
            assert dependency in every, (name, dependency)
            assert rule["condition"] in CONDITIONS, (name, rule)
            if rule["condition"] == "service_completed_successfully":
                assert every[dependency]["restart"] == "no", dependency
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in every[dependency], dependency
        if mode := service.get("network_mode"):
            assert mode.removeprefix("service:") in every, (name, mode)


def test_the_database_is_postgres_15_that_the_relay_services_share() -> None:
    """Postgres 15; every relay service's store URL is that database, with its credentials."""
    every = services()
    postgres = every["postgres"]
    assert postgres["image"].startswith("postgres:15")
    env = postgres["environment"]
    for name in RELAY_SERVICES:
        target = resolve(every[name]["environment"]["TALARIA_RELAY_STORE_URL"])
        assert target.url is not None, name
        assert (target.url.host, target.url.username, target.url.password, target.url.database) == (
            "postgres",
            env["POSTGRES_USER"],
            env["POSTGRES_PASSWORD"],
            env["POSTGRES_DB"],
        )


@pytest.mark.parametrize("name", RELAY_SERVICES)
def test_each_relay_command_is_one_the_cli_accepts(name: str) -> None:
    """Every command line parses with the real `talaria-relay` (or replica) argument parser."""
    words = relay_command(services()[name])
    if words[0] == "talaria-relay":
        args = parser().parse_args(words[1:])
        assert callable(args.run)
    else:
        assert words[:3] == ["python", "-m", "relay.cli.demo"], words
        replica_parser().parse_args(words[3:])


def test_migrations_run_once_before_any_publisher() -> None:
    """`migrate` is a one-shot after a healthy Postgres; the publishers wait for it to succeed."""
    every = services()
    assert relay_command(every["migrate"]) == ["talaria-relay", "migrate"]
    assert every["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    register = every["register"]["depends_on"]
    assert register["migrate"] == {"condition": "service_completed_successfully"}
    for replica in ("replica-1", "replica-2"):
        assert every[replica]["depends_on"] == {
            "register": {"condition": "service_completed_successfully"}
        }


def test_each_replica_has_a_readiness_probe_the_cli_accepts() -> None:
    """Each replica's healthcheck runs `talaria-relay check` (store from the environment) as an
    exec-form command the real parser accepts, with a start period for its install."""
    every = services()
    for name in ("replica-1", "replica-2"):
        probe = every[name]["healthcheck"]
        assert probe["test"][0] == "CMD", (name, probe)
        words = probe["test"][1:]
        assert words[:2] == ["talaria-relay", "check"], (name, words)
        args = parser().parse_args(words[1:])
        assert args.run.__name__ == "cmd_check"
        assert args.store is None  # TALARIA_RELAY_STORE_URL, the shared Postgres
        assert "TALARIA_RELAY_STORE_URL" in every[name]["environment"]
        assert probe["start_period"]


def test_publishers_reach_the_dev_relay_on_its_loopback() -> None:
    """The dev relay serves loopback only, so publishers share its network and use its port."""
    every = services()
    relay = relay_command(every["devrelay"])
    port = relay[relay.index("--port") + 1]
    for name in ("register", "replica-1", "replica-2"):
        assert every[name]["network_mode"] == "service:devrelay"
        words = relay_command(every[name])
        assert words[words.index("--relay-url") + 1] == f"http://127.0.0.1:{port}"


def test_registration_runs_once_over_every_up() -> None:
    """The register step names the shared store itself, and a later `up` skips its registration."""
    words = relay_command(services()["register"])
    args = parser().parse_args(words[1:])
    assert args.store == "$TALARIA_RELAY_STORE_URL"
    assert args.skip_if_registered
