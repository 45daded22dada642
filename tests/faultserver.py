"""Loopback servers that misbehave the way networks and relays do, on real sockets (127.0.0.1).

    async with fault_server(reset_before_answer) as server:
        env.wire.divert("snapshot", server.origin)

Each behaviour is an async function of the connection; the server counts the connections it
accepted and the requests it read.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Behaviour = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OVERSIZE = 300 * 1024  # past the 256 KiB the publisher reads of an answer


@dataclass
class Server:
    origin: str
    requests: list[bytes] = field(default_factory=list)  # each request's head, as received
    connections: int = 0  # accepted


@contextlib.asynccontextmanager
async def fault_server(
    behaviour: Behaviour,
    *,
    tls: ssl.SSLContext | None = None,
    read_first: bool = True,
    keep_alive: bool = False,
) -> AsyncIterator[Server]:
    """Serve `behaviour` on a free loopback port, after reading each request unless told not
    to; with `keep_alive`, once more for each further request on the connection, else the
    connection is cut after one. Every connection is cut when the block ends."""
    handlers: set[asyncio.Task[None]] = set()
    server = Server("")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        server.connections += 1
        try:
            while True:
                if read_first:
                    if not (request := await read_request(reader)):
                        return
                    server.requests.append(request)
                await behaviour(reader, writer)
                if not (keep_alive and read_first):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client gave up first: that is what some faults are for
        except asyncio.CancelledError:
            pass  # the block ended: an endless answer ends here (asyncio 3.11 logs a cancelled one)
        finally:
            writer.transport.abort()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    port = listening.sockets[0].getsockname()[1]
    server.origin = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    try:
        yield server
    finally:
        listening.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await listening.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head, its body read and dropped; empty if the client sent nothing."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return b""
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            await reader.readexactly(int(value))
    return head


def closed_port() -> int:
    """A loopback port nothing listens on: connecting to it is refused. Bound and never
    listening, held by this process for its life, so no other process (a test worker) takes it."""
    from cli_support import free_port

    return free_port()


def reset(writer: asyncio.StreamWriter) -> None:
    """Abort with a TCP RST (linger 0), as a crashed peer or a middlebox does."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def head(status: int, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status} Fault", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# ── behaviours ───────────────────────────────────────────────────────────────


def answer(status: int, body: bytes = b"", *headers: str, close: bool = True) -> Behaviour:
    """A whole answer; unless told not to, it says the connection closes after it."""
    closing = ("Connection: close",) if close else ()

    async def behaviour(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head(status, f"Content-Length: {len(body)}", *closing, *headers))
        writer.write(body)
        await writer.drain()

    return behaviour


async def reset_before_answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The request is read, then the connection is reset: no status line at all."""
    reset(writer)


def reset_mid_body(status: int) -> Behaviour:
    """The status line and a tenth of the announced body, then a reset."""

    async def behaviour(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head(status, "Content-Type: application/json", "Content-Length: 10000"))
        writer.write(b'{"ok":true,"pad":"' + b"x" * 1000)
        await writer.drain()
        await asyncio.sleep(0.05)  # let the client start on the body
        reset(writer)

    return behaviour


async def endless_head(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A status line, then one more header line every 20 ms, never the blank line after them."""
    writer.write(b"HTTP/1.1 200 OK\r\n")
    while True:
        writer.write(b"X-Still-Thinking: yes\r\n")
        await writer.drain()
        await asyncio.sleep(0.02)


def endless_body(status: int, *, chunk: int, every: float) -> Behaviour:
    """A chunked answer that never ends: `chunk` bytes every `every` seconds."""

    async def behaviour(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head(status, "Content-Type: application/json", "Transfer-Encoding: chunked"))
        while True:
            writer.write(b"%x\r\n%s\r\n" % (chunk, b"x" * chunk))
            await writer.drain()
            await asyncio.sleep(every)

    return behaviour


def redirect(status: int, location: str) -> Behaviour:
    return answer(status, b"", f"Location: {location}")


async def plain_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """What a plain HTTP server answers to a TLS handshake (use with `read_first=False`)."""
    await reader.read(4096)
    writer.write(head(400, "Content-Length: 0", "Connection: close"))
    await writer.drain()


# ── TLS ──────────────────────────────────────────────────────────────────────


def self_signed(directory: Path) -> ssl.SSLContext:
    """A server context with a fresh certificate for 127.0.0.1 that no client trusts."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "relay-cert.pem", directory / "relay-key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context
