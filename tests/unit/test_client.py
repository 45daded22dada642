"""The relay HTTP client: signatures a relay can verify, the error mapping, capped answers.

Signatures are checked the way the relay checks them, from what the transport received (method, raw
path, headers, body) with a canonical string rebuilt here, not with `relay.protocol`'s helper.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from secrets_support import verify

from relay.client import DRAIN_CAP, DRAIN_S, RelayClient, TalariaAuth
from relay.errors import (
    InvalidInputError,
    RelayHttpError,
    RelayResponseError,
    RelayTimeoutError,
    RelayUnreachableError,
)
from relay.protocol import PAIRING_RESPONSE_CAP, snapshot_path, started_body

ORIGIN = "https://relay.example"
NOW_S = 1_800_000_000.75
KEY = Ed25519PrivateKey.generate()
KEY_ID = "key_test"
SNAPSHOT = snapshot_path("https://pub.example", "prf_x")
REDEEM = "/v1/pairings/publisher/redeem"
BODY = started_body("https://pub.example", "prf_x", "s1", 1_800_000_000_000)
SIGNING_HEADERS = ("x-talaria-key-id", "x-talaria-timestamp", "x-talaria-nonce")

Handler = Callable[[httpx.Request], Any]
Connect = Callable[..., RelayClient]


def verify_request(request: httpx.Request) -> None:
    """Check the headers and signature of a request a MockTransport received."""
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-talaria-key-id"] == KEY_ID
    assert request.headers["x-talaria-timestamp"] == "1800000000"
    assert re.fullmatch(r"[0-9a-f]{32}", request.headers["x-talaria-nonce"])
    verify(KEY.public_key(), request.method, request.url.raw_path, request.headers, request.content)


def answer(status: int = 200, content: bytes = b'{"ok":true}') -> Handler:
    return lambda request: httpx.Response(status, content=content)


def raising(exc: type[httpx.TransportError]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc("boom", request=request)

    return handler


class Stream(httpx.AsyncByteStream):
    """A response body that counts the chunks read and notes whether it was closed."""

    def __init__(self, chunks: Iterator[bytes], delay: float = 0.0) -> None:
        self.chunks = chunks
        self.delay = delay
        self.read = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            await asyncio.sleep(self.delay)
            self.read += 1
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


@pytest.fixture
async def seen() -> list[httpx.Request]:
    return []


@pytest.fixture
async def connect(seen: list[httpx.Request]) -> AsyncIterator[Connect]:
    """Build RelayClients on a recording MockTransport; the AsyncClients close after the test."""
    clients: list[httpx.AsyncClient] = []

    def make(handler: Handler, base_url: str = ORIGIN, **kwargs: Any) -> RelayClient:
        def record(request: httpx.Request) -> Any:
            seen.append(request)
            return handler(request)

        http = httpx.AsyncClient(transport=httpx.MockTransport(record), **kwargs.pop("http", {}))
        clients.append(http)
        return RelayClient(base_url, http=http, clock=lambda: NOW_S, **kwargs)

    yield make
    for http in clients:
        await http.aclose()


async def test_signed_put_carries_verifiable_headers(
    connect: Connect, seen: list[httpx.Request]
) -> None:
    """A PUT carries the four signing headers and a signature over what was sent."""
    await connect(answer()).put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID)
    (request,) = seen
    assert request.method == "PUT"
    assert str(request.url) == ORIGIN + SNAPSHOT
    assert request.content == BODY
    verify_request(request)


async def test_signed_post_carries_verifiable_headers(
    connect: Connect, seen: list[httpx.Request]
) -> None:
    """A POST given a key is signed like a PUT and returns the relay's JSON object."""
    client = connect(answer(201, b'{"ok":true,"protocolVersion":2}'))
    result = await client.post("/v1/pairings/profile/redeem", BODY, key=KEY, key_id=KEY_ID)
    assert result == {"ok": True, "protocolVersion": 2}
    (request,) = seen
    assert request.method == "POST"
    verify_request(request)


async def test_unsigned_post_carries_no_signature(
    connect: Connect, seen: list[httpx.Request]
) -> None:
    """A POST without a key (server registration) has the JSON content type and no signature."""
    assert await connect(answer(201)).post(REDEEM, BODY) == {"ok": True}
    (request,) = seen
    assert request.headers["content-type"] == "application/json"
    assert not [name for name in request.headers if name.startswith("x-talaria-")]


async def test_unsigned_post_ignores_the_injected_clients_auth(
    connect: Connect, seen: list[httpx.Request]
) -> None:
    """An injected client's default auth is not added to an unsigned request."""
    await connect(answer(), http={"auth": ("user", "secret")}).post(REDEEM, BODY)
    assert "authorization" not in seen[0].headers


async def test_post_needs_key_and_key_id_together(
    connect: Connect, seen: list[httpx.Request]
) -> None:
    """A key without its id (or the reverse) is refused before anything is sent."""
    client = connect(answer())
    with pytest.raises(InvalidInputError):
        await client.post(REDEEM, BODY, key=KEY)
    with pytest.raises(InvalidInputError):
        await client.post(REDEEM, BODY, key_id=KEY_ID)
    assert seen == []


async def test_each_request_gets_a_fresh_nonce(connect: Connect, seen: list[httpx.Request]) -> None:
    """Two requests never share a nonce, which the relay would answer as a replay."""
    client = connect(answer())
    await client.put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID)
    await client.put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID)
    assert seen[0].headers["x-talaria-nonce"] != seen[1].headers["x-talaria-nonce"]


@pytest.mark.parametrize(
    ("publisher_id", "expected"),
    [
        ("https://pub.example:8443", "/v1/publishers/https%3A%2F%2Fpub.example%3A8443/"),
        ("http://a.example/b:c", "/v1/publishers/http%3A%2F%2Fa.example%2Fb%3Ac/"),
    ],
)
async def test_encoded_ids_stay_encoded_on_the_wire(
    connect: Connect, seen: list[httpx.Request], publisher_id: str, expected: str
) -> None:
    """`/` and `:` in an id go out as `%2F` and `%3A`, and the signature covers them so."""
    path = snapshot_path(publisher_id, "prf/x")
    await connect(answer()).put(path, BODY, key=KEY, key_id=KEY_ID)
    raw_path = seen[0].url.raw_path
    assert raw_path == path.encode()
    assert raw_path.startswith(expected.encode())
    assert b"/profiles/prf%2Fx/snapshot" in raw_path
    verify_request(seen[0])


async def test_percent_escapes_keep_their_hex_case(
    connect: Connect, seen: list[httpx.Request]
) -> None:
    """Lowercase escapes are neither upper-cased nor decoded: the path goes out as signed."""
    path = "/v1/publishers/https%3a%2f%2fpub.example/profiles/prf_x/snapshot"
    await connect(answer()).put(path, BODY, key=KEY, key_id=KEY_ID)
    assert seen[0].url.raw_path == path.encode()
    verify_request(seen[0])


@pytest.mark.parametrize(
    "path",
    [
        "/v1/publishers/p/profiles/prf_x/sessions/../viewed",
        "/v1/./snapshot",
        "/v1/sessions/a b",
        "/v1/sessions/é",
        "/v1/sessions/a#b",
        "/v1/sessions/a\nb",
        "v1/snapshot",
    ],
)
async def test_paths_httpx_would_rewrite_are_refused(
    connect: Connect, seen: list[httpx.Request], path: str
) -> None:
    """A path httpx would normalise or escape is refused unsent, not sent as another path."""
    with pytest.raises(InvalidInputError):
        await connect(answer()).put(path, BODY, key=KEY, key_id=KEY_ID)
    assert seen == []


async def test_base_url_is_joined_by_concatenation(
    connect: Connect, seen: list[httpx.Request]
) -> None:
    """The origin's trailing slash is trimmed and an injected client's base_url plays no part."""
    client = connect(
        answer(), base_url=" https://relay.example/ ", http={"base_url": ORIGIN + "/x/"}
    )
    await client.put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID)
    assert str(seen[0].url) == ORIGIN + SNAPSHOT


def test_base_url_must_be_an_origin() -> None:
    """A relay URL with a path is refused: paths are only ever appended to a bare origin."""
    with pytest.raises(InvalidInputError):
        RelayClient(ORIGIN + "/api")


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (408, True),
        (425, True),
        (429, True),
        (500, True),
        (503, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (409, False),
    ],
)
async def test_non_2xx_is_an_http_error(connect: Connect, status: int, retryable: bool) -> None:
    """Any non-2xx answer raises RelayHttpError with its status, retryable only when transient."""
    client = connect(answer(status))
    for send in (
        client.put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID),
        client.post(REDEEM, BODY),
    ):
        with pytest.raises(RelayHttpError) as caught:
            await send
        assert caught.value.status == status
        assert caught.value.retryable is retryable
        assert str(caught.value) == f"Talaria relay returned HTTP {status}"


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b'{"error":"invalid_invitation"}', "invalid_invitation"),
        (b'{"error":"a\\nforged log line"}', None),
        (b'{"error":42}', None),
        (b"<html>bad gateway</html>", None),
        (b'{"error":"' + b"x" * 5000 + b'"}', None),
    ],
    ids=["code", "not-a-token", "not-a-string", "not-json", "too-large"],
)
async def test_an_http_error_carries_the_relays_reason(
    connect: Connect, content: bytes, code: str | None
) -> None:
    """A refusal's `{"error": CODE}` is `RelayHttpError.code` when it is a short plain token."""
    with pytest.raises(RelayHttpError) as caught:
        await connect(answer(400, content)).post(REDEEM, BODY)
    assert caught.value.code == code
    assert str(caught.value) == "Talaria relay returned HTTP 400"


async def test_redirect_is_not_followed(connect: Connect, seen: list[httpx.Request]) -> None:
    """A 3xx is an error: following it would send a signature for another path."""
    moved = lambda request: httpx.Response(307, headers={"Location": "/elsewhere"})  # noqa: E731
    with pytest.raises(RelayHttpError) as caught:
        await connect(moved, http={"follow_redirects": True}).put(
            SNAPSHOT, BODY, key=KEY, key_id=KEY_ID
        )
    assert caught.value.status == 307
    assert len(seen) == 1


async def test_a_put_refusal_is_closed_unread(connect: Connect) -> None:
    """A PUT's refusal is closed with its body unread, as upstream leaves it."""
    stream = Stream(iter([b"{}"]))
    client = connect(lambda request: httpx.Response(503, stream=stream))
    with pytest.raises(RelayHttpError):
        await client.put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID)
    assert stream.read == 0
    assert stream.closed


async def test_a_put_success_is_read_to_its_end_and_dropped(connect: Connect) -> None:
    """A PUT's 2xx answer is read to its end (so httpx can pool its connection) and closed;
    what it says is not used, even when it does not parse."""
    stream = Stream(iter([b'{"ok":', b"nonsense"]))
    client = connect(lambda request: httpx.Response(200, stream=stream))
    await client.put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID)
    assert stream.read == 2
    assert stream.closed


async def test_a_put_success_stops_reading_once_over_the_drain_cap(connect: Connect) -> None:
    """An endless 2xx answer to a PUT is abandoned once past `DRAIN_CAP`: still a success."""
    stream = Stream(iter(lambda: b"x" * 65536, None))
    client = connect(lambda request: httpx.Response(200, stream=stream))
    await client.put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID)
    assert stream.read == DRAIN_CAP // 65536 + 1
    assert stream.closed


@pytest.mark.parametrize("limit", [10.0, 0.05], ids=["drain-bound", "request-timeout"])
async def test_a_put_success_trickling_its_answer_is_not_waited_for(
    connect: Connect, limit: float
) -> None:
    """A PUT's 2xx answer trickling in is read for at most `DRAIN_S`, or what is left of the
    request's timeout when that is shorter, then abandoned: still a success."""
    stream = Stream(iter([b" "] * 10_000), delay=0.01)
    client = connect(lambda request: httpx.Response(200, stream=stream), timeout=limit)
    await client.put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID)
    assert stream.read < min(DRAIN_S, limit) * 100 + 1
    assert stream.closed


async def test_a_put_success_cut_off_mid_answer_is_a_success(connect: Connect) -> None:
    """A 2xx answer to a PUT whose body breaks off (a reset) leaves the PUT a success."""

    def cut() -> Iterator[bytes]:
        yield b'{"ok":'
        raise httpx.ReadError("Connection reset by peer")

    stream = Stream(cut())
    client = connect(lambda request: httpx.Response(200, stream=stream))
    await client.put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID)
    assert stream.read == 1
    assert stream.closed


@pytest.mark.parametrize("exc", [httpx.ConnectTimeout, httpx.ReadTimeout, httpx.PoolTimeout])
async def test_timeouts_map_to_timeout_error(
    connect: Connect, exc: type[httpx.TransportError]
) -> None:
    """An httpx timeout becomes RelayTimeoutError, for PUT and POST alike."""
    client = connect(raising(exc))
    for send in (client.put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID), client.post(REDEEM, BODY)):
        with pytest.raises(RelayTimeoutError) as caught:
            await send
        assert str(caught.value) == "Could not reach Talaria Relay: boom"


@pytest.mark.parametrize(
    "exc", [httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.ProxyError]
)
async def test_network_errors_map_to_unreachable(
    connect: Connect, exc: type[httpx.TransportError]
) -> None:
    """Any other transport failure is RelayUnreachableError and not a timeout."""
    client = connect(raising(exc))
    for send in (client.put(SNAPSHOT, BODY, key=KEY, key_id=KEY_ID), client.post(REDEEM, BODY)):
        with pytest.raises(RelayUnreachableError) as caught:
            await send
        assert str(caught.value) == "Could not reach Talaria Relay: boom"
        assert not isinstance(caught.value, RelayTimeoutError)


async def test_whole_exchange_is_bounded_by_the_timeout(connect: Connect) -> None:
    """A relay trickling its answer cannot hold a request past `timeout` in total."""
    stream = Stream(iter([b" "] * 100), delay=0.01)
    client = connect(lambda request: httpx.Response(200, stream=stream), timeout=0.1)
    with pytest.raises(RelayTimeoutError, match="Could not reach Talaria Relay"):
        await client.post(REDEEM, BODY)
    assert 0 < stream.read < 100
    assert stream.closed


async def test_post_accepts_exactly_the_cap(connect: Connect) -> None:
    """A 256 KiB answer of valid JSON is read whole."""
    content = b'{"k":"' + b"x" * (PAIRING_RESPONSE_CAP - 8) + b'"}'
    assert len(content) == PAIRING_RESPONSE_CAP
    result = await connect(answer(201, content)).post(REDEEM, BODY)
    assert len(result["k"]) == PAIRING_RESPONSE_CAP - 8


async def test_post_refuses_one_byte_over_the_cap(connect: Connect) -> None:
    """A 256 KiB + 1 answer is an invalid response, even though it is valid JSON."""
    content = b'{"k":"' + b"x" * (PAIRING_RESPONSE_CAP - 7) + b'"}'
    with pytest.raises(RelayResponseError):
        await connect(answer(201, content)).post(REDEEM, BODY)


async def test_post_stops_reading_once_over_the_cap(connect: Connect) -> None:
    """An endless answer is abandoned and closed once past the cap, not read to its end."""
    stream = Stream(iter(lambda: b"x" * 65536, None))
    with pytest.raises(RelayResponseError):
        await connect(lambda request: httpx.Response(201, stream=stream)).post(REDEEM, BODY)
    assert stream.read == PAIRING_RESPONSE_CAP // 65536 + 1
    assert stream.closed


@pytest.mark.parametrize(
    "content", [b"", b"not json", b"{", b"\xff\xfe\x00", b"[" * 100_000 + b"]" * 100_000]
)
async def test_post_refuses_non_json(connect: Connect, content: bytes) -> None:
    """An answer that does not parse as JSON, however it fails, is an invalid response."""
    with pytest.raises(RelayResponseError, match="invalid response"):
        await connect(answer(201, content)).post(REDEEM, BODY)


@pytest.mark.parametrize("content", [b"[]", b'[{"ok":true}]', b"null", b"2", b'"ok"'])
async def test_post_non_object_json_is_empty(connect: Connect, content: bytes) -> None:
    """JSON that is not an object reads as `{}`, as upstream does."""
    assert await connect(answer(201, content)).post(REDEEM, BODY) == {}


async def test_post_undecodable_encoding_is_invalid(connect: Connect) -> None:
    """A body whose Content-Encoding does not decode is an invalid response, not a crash."""
    gzip = {"Content-Encoding": "gzip"}
    client = connect(
        lambda request: httpx.Response(200, stream=Stream(iter([b"junk"])), headers=gzip)
    )
    with pytest.raises(RelayResponseError):
        await client.post(REDEEM, BODY)


async def test_injected_client_is_left_open() -> None:
    """`aclose` leaves an injected AsyncClient open for its owner."""
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer())) as http:
        async with RelayClient(ORIGIN, http=http) as client:
            await client.post(REDEEM, BODY)
        await client.aclose()
        assert not http.is_closed


async def test_owned_client_is_closed() -> None:
    """`aclose` and leaving the context close the AsyncClient the RelayClient created."""
    async with RelayClient(ORIGIN) as client:
        assert not client._http.is_closed
    assert client._http.is_closed
    other = RelayClient(ORIGIN)
    await other.aclose()
    assert other._http.is_closed


def test_auth_signs_the_path_without_its_query() -> None:
    """TalariaAuth signs the pathname only, as the relay verifies it, with the injected clock."""
    auth = TalariaAuth(KEY, KEY_ID, clock=lambda: 5.9, nonce=lambda: "n1")
    request = httpx.Request("PUT", ORIGIN + "/v1/a%2Fb?x=1", content=b"{}")
    signed = next(auth.sync_auth_flow(request))
    assert signed.headers["x-talaria-timestamp"] == "5"
    assert signed.headers["x-talaria-nonce"] == "n1"
    verify(KEY.public_key(), "PUT", b"/v1/a%2Fb", signed.headers, b"{}")


async def test_request_line_on_a_real_socket_is_the_signed_path() -> None:
    """Over loopback HTTP, the request line carries the signed path byte for byte."""
    captured: dict[str, Any] = {}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        fields = [line.partition(": ") for line in head[1:] if line]
        headers = httpx.Headers({name: value for name, _, value in fields})
        captured["line"], captured["headers"] = head[0], headers
        captured["body"] = await reader.readexactly(int(headers["content-length"]))
        writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    path = snapshot_path("https://pub.example:8443/", "prf:x")
    async with server, httpx.AsyncClient(trust_env=False) as http:
        client = RelayClient(f"http://127.0.0.1:{port}", http=http, clock=lambda: NOW_S)
        await client.put(path, BODY, key=KEY, key_id=KEY_ID)
    method, target, version = captured["line"].split(" ")
    assert (method, version) == ("PUT", "HTTP/1.1")
    assert target == path
    assert "%2F" in target
    assert "%3A" in target
    assert captured["body"] == BODY
    verify(
        KEY.public_key(), method, target.encode("latin-1"), captured["headers"], captured["body"]
    )
