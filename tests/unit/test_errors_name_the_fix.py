"""Errors a newcomer meets name the fix: a port nothing listens on, a plain-http relay, and a
refused invitation's own status told apart from the relay's."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any, cast

import pytest

from relay import PublisherOptions
from relay.cli.main import refusal
from relay.client import RelayClient
from relay.errors import (
    InvalidInputError,
    RelayHttpError,
    RelayPairingError,
    RelayUnreachableError,
    StoreUnavailableError,
)
from relay.pairing import Pairing
from relay.service import RelayService
from relay.store import open_store
from relay.testing import MemoryHost


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound but not listening, so a connection to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


async def test_a_relay_port_nothing_listens_on_is_named(closed_port: int) -> None:
    """The relay client says nothing is listening at host:port, not `[Errno 111] …`."""
    client = RelayClient(f"http://127.0.0.1:{closed_port}")
    try:
        with pytest.raises(RelayUnreachableError) as caught:
            await client.post("/v1/pairings/publisher/redeem", b"{}")
    finally:
        await client.aclose()
    assert f"nothing is listening at 127.0.0.1:{closed_port}" in str(caught.value)
    assert "Errno" not in str(caught.value)


async def test_a_store_port_nothing_listens_on_is_named(closed_port: int) -> None:
    """A Postgres URL with a port nothing listens on: unavailable, naming host:port."""
    with pytest.raises(StoreUnavailableError) as caught:
        await open_store(f"postgresql://relay@127.0.0.1:{closed_port}/relay?connect_timeout=5")
    assert f"nothing is listening at 127.0.0.1:{closed_port}" in str(caught.value)
    assert f"postgresql://relay@127.0.0.1:{closed_port}/relay" in str(caught.value)


@pytest.mark.parametrize("relay_url", ["http://127.0.0.1:8787", "http://relay.example"])
async def test_a_plain_http_relay_names_allow_insecure_loopback(relay_url: str) -> None:
    """A refused http:// relay says upstream's words, then how it is accepted."""

    async def configure(*_: object) -> None:
        raise AssertionError("nothing is configured")

    async with open_store("memory://") as store:
        pairing = Pairing(
            store,
            MemoryHost(["default"]),
            trusted=relay_url,
            allow_insecure_loopback=False,
            client=RelayClient,
            configure=configure,
        )
        body = {
            "relay_url": relay_url,
            "publisher_id": "https://hermes.example",
            "publisher_invitation": "invite",
        }
        with pytest.raises(RelayPairingError) as caught:
            await pairing.pair(body, "default", operator=True)
    assert caught.value.status == 400
    assert str(caught.value).startswith("value must be an HTTPS origin")
    assert "allow_insecure_loopback=True" in str(caught.value)


def test_a_refused_invitation_prints_its_own_status() -> None:
    """The command line prints the refusal's status (409) and the relay's answer (400 and its
    reason) apart, with what to do, where upstream's message said only "(HTTP 400)"."""
    cause = RelayHttpError(400, "expired_invitation")
    error = RelayPairingError("Talaria Relay rejected server registration (HTTP 400)", 409)
    error.__cause__ = cause
    shown = refusal(error)
    assert shown.startswith("pairing refused with 409: Talaria Relay rejected server registration")
    assert "(HTTP 400)" not in shown
    assert "the relay answered HTTP 400 expired_invitation" in shown
    assert "ask for a new one" in shown
    unreachable = RelayPairingError("Could not reach Talaria Relay", 502)
    unreachable.__cause__ = RelayUnreachableError(
        "Could not reach Talaria Relay: nothing is listening at 127.0.0.1:9"
    )
    assert refusal(unreachable).endswith("nothing is listening at 127.0.0.1:9")


@pytest.mark.parametrize(
    ("given", "named"),
    [({"lease_s": 0}, "lease_s"), ({"heartbeat_s": float("nan")}, "heartbeat_s"),
     ({"lease_s": "20"}, "lease_s"), ({"background": 1}, "background")],
)  # fmt: skip
def test_a_bad_publisher_option_is_refused_naming_it_and_a_good_value(
    given: dict[str, Any], named: str
) -> None:
    """`PublisherOptions` checks its values when made: the error names the option and how to
    set it, before any service or publisher exists."""
    with pytest.raises(InvalidInputError) as caught:
        PublisherOptions(**given)
    assert named in str(caught.value)


async def test_publishing_as_a_dict_is_refused_naming_publisher_options() -> None:
    """The untyped form of 0.1 (`publisher_options={...}`, now `publishing=`) is refused, not
    splatted: the error names `PublisherOptions`."""
    async with open_store("memory://") as store:
        with pytest.raises(InvalidInputError, match="PublisherOptions"):
            RelayService(store, MemoryHost(), publishing=cast(Any, {"lease_s": 30}))
