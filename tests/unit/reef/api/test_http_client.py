"""The upstream relay's HTTP/1.1 client (reef.api.http_client) against a raw loopback
server that answers with scripted bytes: reuse, body framings, failures, limits."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import gzip
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reef.api import http_client
from reef.api.http_client import ConnectFailed, HttpClient, ReplyBroken, TimedOut
from reef.testing.servers import dead_url

#: (request head, body, writer) -> what the server does for it
Script = Callable[[bytes, bytes, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class RawServer:
    url: str
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    requests: list[bytes] = field(default_factory=list)


Serve = Callable[[Script], Awaitable[RawServer]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[asyncio.Server] = []

    async def start(script: Script) -> RawServer:
        state = RawServer("")

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            state.connections += 1
            state.open_now += 1
            state.most_open = max(state.most_open, state.open_now)
            try:
                while True:
                    try:
                        head = await reader.readuntil(b"\r\n\r\n")
                    except (asyncio.IncompleteReadError, ConnectionError):
                        return
                    length = next(
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                    body = await reader.readexactly(length)
                    state.requests.append(head + body)
                    await script(head, body, writer)
                    if writer.is_closing():
                        return
            finally:
                state.open_now -= 1
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        state.url = f"http://127.0.0.1:{port}/v1/chat?x=1"
        return state

    yield start
    for server in servers:
        server.close()


def client(
    *,
    limit: int = 10,
    read_timeout: float = 2.0,
    tls: ssl.SSLContext | None = None,
) -> HttpClient:
    return HttpClient(limit=limit, connect_timeout=2.0, read_timeout=read_timeout, tls=tls)


def reply(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    head = [f"HTTP/1.1 {status}", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        head.append(f"content-length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def get(c: HttpClient, url: str, body: bytes = b"{}") -> tuple[int, bytes, str | None]:
    answer = await c.request("POST", url, {"content-type": "application/json"}, body)
    try:
        return answer.status, await answer.read(), answer.headers.get("X-Thing")
    finally:
        answer.release()


async def test_sequential_requests_share_one_connection_and_arrive_whole(serve: Serve) -> None:
    async def echo(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(reply(body, "x-thing: yes"))

    server = await serve(echo)
    c = client()
    for i in range(5):
        assert await get(c, server.url, f'{{"i": {i}}}'.encode()) == (200, b'{"i": %d}' % i, "yes")
    await c.close()
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/chat?x=1 HTTP/1.1\r\n")
    assert b"\r\nhost: 127.0.0.1:" in first and b"\r\ncontent-type: application/json\r\n" in first


async def test_a_chunked_stream_is_read_as_it_arrives(serve: Serve) -> None:
    release = asyncio.Event()

    async def stream(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n")
        writer.write(b"a\r\ndata: one\n\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"a\r\ndata: two\n\r\n0\r\n\r\n")

    server = await serve(stream)
    c = client()
    answer = await c.request("POST", server.url, {}, b"{}")
    chunks = answer.iter_chunks()
    assert await anext(chunks) == b"data: one\n"  # before the rest was even written
    release.set()
    assert [chunk async for chunk in chunks] == [b"data: two\n"]
    answer.release()
    assert await get(c, server.url) == (200, b"data: one\ndata: two\n", None)  # reused
    assert server.connections == 1
    await c.close()


async def test_bodies_ended_by_the_close_and_compressed_bodies(serve: Serve) -> None:
    async def until_close(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> None:
        if b"gzip" in body:
            writer.write(reply(gzip.compress(b"x" * 5000), "content-encoding: gzip"))
            return
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        await writer.drain()
        writer.close()

    server = await serve(until_close)
    c = client()
    assert await get(c, server.url) == (200, b"all of it", None)
    assert await get(c, server.url) == (200, b"all of it", None)  # not reused: a new one
    assert await get(c, server.url, b"gzip") == (200, b"x" * 5000, None)
    assert server.connections == 3
    await c.close()


async def test_a_big_body_arrives_intact_through_paused_reading(serve: Serve) -> None:
    big = bytes(range(256)) * 8192  # 2 MiB: reading pauses above 256 KiB waiting

    async def large(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(reply(big))

    server = await serve(large)
    c = client()
    answer = await c.request("POST", server.url, {}, b"{}")
    got = bytearray()
    async for chunk in answer.iter_chunks():
        got += chunk
        await asyncio.sleep(0)
    answer.release()
    assert bytes(got) == big
    await c.close()


async def test_failures_are_told_apart(serve: Serve) -> None:
    async def misbehave(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> None:
        if body == b"slow":
            await asyncio.sleep(1.0)
        elif body == b"cut":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npart")
            await writer.drain()
            writer.close()
        elif body == b"garbage":
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        else:
            writer.write(reply(b"fine"))

    server = await serve(misbehave)
    c = client(read_timeout=0.3)
    with pytest.raises(TimedOut):
        await get(c, server.url, b"slow")
    with pytest.raises(ReplyBroken):
        await get(c, server.url, b"cut")
    with pytest.raises(ReplyBroken):
        await get(c, server.url, b"garbage")
    with pytest.raises(ConnectFailed):
        await get(c, dead_url() + "/v1/chat")
    with pytest.raises(ConnectFailed, match="line break"):  # never a second request
        await c.request("POST", server.url, {"x-a": "1\r\nx-injected: 2"}, b"{}")
    assert await get(c, server.url) == (200, b"fine", None)  # the pool still serves
    await c.close()


async def test_at_most_limit_connections_and_idle_ones_expire(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def slow(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.05)
        writer.write(reply(b"ok"))

    server = await serve(slow)
    c = client(limit=2)
    answers = await asyncio.gather(*(get(c, server.url) for _ in range(6)))
    assert answers == [(200, b"ok", None)] * 6
    assert server.most_open == 2 and server.connections == 2
    monkeypatch.setattr(http_client, "IDLE_SECONDS", 0.0)
    assert await get(c, server.url) == (200, b"ok", None)
    assert server.connections == 3  # the idle ones were too old: closed, not reused
    await c.close()


async def test_https_is_verified_against_the_trusted_authorities(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(2)
                writer.write(reply(b"secret"))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=served)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat"
    trusting = ssl.create_default_context(cafile=str(cert))
    c = client(tls=trusting)
    assert await get(c, url) == (200, b"secret", None)
    assert await get(c, url) == (200, b"secret", None)
    await c.close()
    untrusting = client()  # the system's authorities never signed this certificate
    with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
        await get(untrusting, url)
    await untrusting.close()
    server.close()


def _self_signed(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_a_reply_dropped_unreleased_gives_its_slot_back(serve: Serve) -> None:
    """A relay cancelled before it began never releases its reply: the slot and the
    connection come back when the reply is collected, so the pool never runs dry."""

    async def stream(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")

    server = await serve(stream)
    c = client(limit=1)
    for _ in range(3):  # each would wait for ever for the one slot if it leaked
        answer = await asyncio.wait_for(c.request("POST", server.url, {}, b"{}"), 5)
        assert answer.status == 200
        del answer
        gc.collect()
        await asyncio.sleep(0)  # the finaliser's call_soon_threadsafe runs here
    assert server.connections == 3  # each dropped mid-body: closed, never reused
    await c.close()


async def test_a_reply_read_whole_while_reading_paused_is_not_kept_paused() -> None:
    """A body that crossed the pause mark and ended in the same read completes while the
    transport is paused; released unread, that connection must not go back to the pool
    (its next reply would never be read)."""

    class Transport:
        paused = False
        closed = False

        def write(self, data: bytes) -> None:
            pass

        def pause_reading(self) -> None:
            self.paused = True

        def resume_reading(self) -> None:
            self.paused = False

        def is_closing(self) -> bool:
            return self.closed

        def close(self) -> None:
            self.closed = True

    c = client(limit=1)
    await c._slots.acquire()  # as request() does before it uses a connection
    connection = http_client._Connection(c, ("http", "127.0.0.1", 1))
    transport = Transport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.start(b"POST / HTTP/1.1\r\n\r\n", 1.0)
    big = b"x" * (http_client._HIGH_WATER + 1)
    connection.data_received(reply(big))  # headers, the whole body and its end at once
    assert transport.paused
    connection.finish()  # released without reading a byte of it
    assert transport.closed and not c._idle.get(("http", "127.0.0.1", 1))
