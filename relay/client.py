"""The HTTP client of Talaria Relay: signed requests, the relay's error mapping, capped answers.

The relay verifies each signature over the request path exactly as it arrives, so the path signed
is the one httpx puts on the request line (`request.url.raw_path`), and a path that httpx would
rewrite before sending (dot segments, characters it escapes) is refused instead of being sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import KW_ONLY, dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any, Self, cast

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from relay import tracing
from relay.errors import (
    InvalidInputError,
    RelayHttpError,
    RelayRequestError,
    RelayResponseError,
    RelayTimeoutError,
    RelayUnreachableError,
)
from relay.protocol import (
    PAIRING_RESPONSE_CAP,
    REQUEST_TIMEOUT_S,
    SIGNATURE_WINDOW_S,
    b64url,
    canonical_string,
    validated_origin,
)
from relay.refused import chain, nothing_listening, unknown_host

UNREACHABLE = "Could not reach Talaria Relay"
# An error answer is read this far for its reason; it is a code, not a document.
ERROR_BODY_CAP = 4096
# A successful PUT's answer is read (and dropped) only so that its connection can carry the next
# request instead of a new TCP and TLS handshake; past this size or time the connection is closed.
# The relay's answer is a few bytes sent with its head: even 100 ms away, in the status's trip.
DRAIN_CAP = 64 * 1024
DRAIN_S = 0.5


@dataclass(frozen=True, slots=True)
class TalariaAuth(httpx.Auth):
    """Signs a request with the publisher's Ed25519 key, over the bytes that go on the wire."""

    # httpx reads the body before `auth_flow`, so `request.content` is exactly what is sent.
    requires_request_body = True

    key: Ed25519PrivateKey
    key_id: str
    _: KW_ONLY
    clock: Callable[[], float] = time.time
    nonce: Callable[[], str] = lambda: uuid.uuid4().hex

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        # `raw_path` is the request target httpx sends; the relay verifies over the pathname alone.
        path = request.url.raw_path.partition(b"?")[0].decode("ascii")
        timestamp = str(int(self.clock()))
        nonce = self.nonce()
        message = canonical_string(request.method, path, timestamp, nonce, request.content)
        request.headers["X-Talaria-Key-Id"] = self.key_id
        request.headers["X-Talaria-Timestamp"] = timestamp
        request.headers["X-Talaria-Nonce"] = nonce
        request.headers["X-Talaria-Signature"] = b64url(self.key.sign(message))
        yield request


class RelayClient:
    """Sends the publisher's requests to one relay origin and maps failures to `relay.errors`."""

    def __init__(
        self,
        base_url: str,
        *,
        http: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.time,
        timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        # A bare origin without a trailing slash, so `origin + path` is the URL as built.
        self._origin = validated_origin(base_url)
        self._owns_http = http is None
        # httpx's default pool (100 connections, 20 kept alive for 5 s idle) keeps a connection
        # for each of a pass's `SNAPSHOT_CONCURRENCY` PUTs in flight, for the next pass to reuse.
        self._http = http if http is not None else httpx.AsyncClient()
        self._clock = clock
        self._timeout = timeout

    async def put(self, path: str, body: bytes, *, key: Ed25519PrivateKey, key_id: str) -> None:
        """A signed PUT; only the status matters: the answer's body is never used (see `_drain`)."""
        await self._send("PUT", path, body, TalariaAuth(key, key_id, clock=self._clock), None)

    async def post(
        self,
        path: str,
        body: bytes,
        *,
        key: Ed25519PrivateKey | None = None,
        key_id: str | None = None,
    ) -> dict[str, Any]:
        """A POST, signed when given a key; the JSON object answered (`{}` for any other JSON)."""
        auth: httpx.Auth | None = None
        if key is not None and key_id is not None:
            auth = TalariaAuth(key, key_id, clock=self._clock)
        elif key is not None or key_id is not None:
            raise InvalidInputError("key and key_id go together")
        data = await self._send("POST", path, body, auth, PAIRING_RESPONSE_CAP)
        try:
            value = json.loads(data)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser
            raise RelayResponseError from None
        return value if isinstance(value, dict) else {}

    async def _send(
        self, method: str, path: str, body: bytes, auth: httpx.Auth | None, cap: int | None
    ) -> bytes:
        """Send one request; the 2xx answer's body up to `cap` bytes, or none without a cap."""
        try:
            url = httpx.URL(self._origin + path)
        except httpx.InvalidURL as exc:
            raise InvalidInputError(f"invalid relay path: {path!r}") from exc
        # httpx drops `.`/`..` segments and escapes some characters; a path it would change must
        # not be sent, since the relay would route (and verify) a different path than was built.
        if not path.startswith("/") or url.raw_path != path.encode("utf-8"):
            raise InvalidInputError(f"path would not be sent as built: {path!r}")
        headers = {"Content-Type": "application/json"}
        request = self._http.build_request(
            method, url, content=body, headers=headers, timeout=self._timeout
        )
        with tracing.http_span(method, self._origin + path) as span:
            try:
                return await self._exchange(request, auth, cap, span)
            except RelayRequestError as error:
                if span is not None:
                    status = error.status if isinstance(error, RelayHttpError) else None
                    tracing.failed(span, error, None if status is None else str(status))
                raise

    async def _exchange(
        self, request: httpx.Request, auth: httpx.Auth | None, cap: int | None, span: Any
    ) -> bytes:
        try:
            # httpx's timeout bounds each network operation; this bounds the whole exchange, as
            # upstream's abort signal does, so a relay trickling bytes cannot hold the loop.
            async with asyncio.timeout(self._timeout) as bound:
                # A redirect is an error (retried, never followed): its signature would not cover
                # the path it leads to, and the host it names is not the one pairing trusted.
                # `auth=None` also keeps an injected client's default auth off unsigned requests.
                response = await self._http.send(
                    request, auth=auth, stream=True, follow_redirects=False
                )
                if span is not None:
                    span.set_attribute("http.response.status_code", response.status_code)
                if not response.is_success:
                    async with contextlib.aclosing(response):
                        # A PUT's refusal stays unread (as upstream); a redeem's says why.
                        code = None if cap is None else await _error_code(response)
                    raise _http_error(response, self._clock(), code)
                if cap is not None:
                    async with contextlib.aclosing(response):
                        return await _read_capped(response, cap)
        except (httpx.TimeoutException, TimeoutError) as exc:
            raise RelayTimeoutError(f"{UNREACHABLE}: {describe(exc)}") from exc
        except httpx.TransportError as exc:
            raise RelayUnreachableError(f"{UNREACHABLE}: {describe(exc)}") from exc
        # A PUT the relay accepted: the status was its whole answer, whatever its body does next
        # (so this is outside the timeout's block, which would make a slow body a failure).
        await _drain(response, bound.when())
        return b""

    async def aclose(self) -> None:
        """Close the AsyncClient if this client created it; an injected one belongs to its owner."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _read_capped(response: httpx.Response, cap: int) -> bytes:
    """The body, or `RelayResponseError` as soon as more than `cap` bytes have arrived."""
    body = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > cap:
                raise RelayResponseError  # the caller closes the response, which stops the stream
    except httpx.DecodingError:  # a Content-Encoding that does not decode
        raise RelayResponseError from None
    return bytes(body)


async def _drain(response: httpx.Response, deadline: float | None) -> None:
    """Read a successful PUT's answer to its end and drop it, so that httpx returns the connection
    to its pool; one over `DRAIN_CAP` bytes, slower than `DRAIN_S` (or than the request's own
    `deadline`, a loop time) or cut off closes its connection instead. Never fails."""
    until = asyncio.get_running_loop().time() + DRAIN_S
    size = 0
    try:
        if response.is_stream_consumed:
            return  # an answer built in memory (a mock transport, say): nothing left to read
        async with (
            asyncio.timeout_at(until if deadline is None else min(until, deadline)),
            # Raw: nothing is decoded. Closed here, not left for the garbage collector.
            contextlib.aclosing(cast(AsyncGenerator[bytes, None], response.aiter_raw())) as chunks,
        ):
            async for chunk in chunks:
                size += len(chunk)
                if size > DRAIN_CAP:
                    break  # closing the response mid-body closes its connection
    except (httpx.HTTPError, TimeoutError):
        pass  # only the connection is lost: the relay took the PUT
    finally:
        await response.aclose()


async def _error_code(response: httpx.Response) -> str | None:
    """The relay's reason, `{"error": "<code>"}`: a short token, or None for anything else."""
    body = None
    with contextlib.suppress(RelayResponseError, ValueError, httpx.HTTPError):
        body = json.loads(await _read_capped(response, ERROR_BODY_CAP))
    code = body.get("error") if isinstance(body, dict) else None
    # Only a plain token is shown: the body is the relay's, and it ends up in logs and terminals.
    if isinstance(code, str) and 0 < len(code) <= 64 and code.replace("_", "").isalnum():
        return code if code.isascii() else None
    return None


def _http_error(response: httpx.Response, now: float, code: str | None) -> RelayHttpError:
    """A non-2xx answer, with what its headers say about when to retry and about our clock."""
    status = response.status_code
    relay_now = _http_date(response.headers.get("Date"))
    retry_after = None
    # RFC 9110 and RFC 6585 give Retry-After to these two; elsewhere it is not a promise.
    if status in (429, 503) and "Retry-After" in response.headers:
        value = response.headers["Retry-After"].strip()
        if value.isascii() and value.isdigit():
            retry_after = min(float(value), 1e10)  # any number of digits: a wait, never infinity
        elif (when := _http_date(value)) is not None:
            retry_after = max(when - (now if relay_now is None else relay_now), 0.0)
    skew = None
    # The relay checks the timestamp before the key: a 401 with our clock outside its window is
    # a clock problem (fixed on this server, then retried), not a refused key.
    if status == 401 and relay_now is not None and abs(now - relay_now) > SIGNATURE_WINDOW_S:
        skew = now - relay_now
    return RelayHttpError(status, code, retry_after=retry_after, clock_skew=skew)


def _http_date(value: str | None) -> float | None:
    """An HTTP-date (`Date`, `Retry-After`) as Unix seconds; None when absent or malformed."""
    if not value:
        return None
    with contextlib.suppress(TypeError, ValueError, IndexError, OverflowError):
        parsed = parsedate_to_datetime(value)
        # `-0000` parses as naive; HTTP-dates are always GMT.
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    return None


def describe(exc: Exception) -> str:
    # httpx's errors often carry an empty message (timeouts, resets): the first cause with one
    # says what happened ("Connection reset by peer"); failing that, the class name does.
    if (refused := nothing_listening(exc)) is not None:
        return refused
    host = None  # the host an httpx request went to (never its credentials), when it has one
    with contextlib.suppress(RuntimeError):  # httpx: an error raised before its request was set
        host = str(exc.request.url.host) if isinstance(exc, httpx.RequestError) else None
    if (unknown := unknown_host(exc, host)) is not None:
        return unknown
    return next((str(cause) for cause in chain(exc) if str(cause)), type(exc).__name__)
