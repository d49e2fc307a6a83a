"""A minimal HTTP/1.1 client for the upstream relay: keep-alive connections, one request
out, one reply read whole or as chunks. Nothing else (no redirects, cookies, proxies).

Reef sends every exchange through it, so its cost is paid per request: it is an
:class:`asyncio.Protocol` that writes the request in one call and feeds the reply to
httptools' C parser (the one uvicorn serves with), with no request or response objects,
timer contexts or tracing hooks of its own (``docs/performance.md`` compares it with a
general-purpose client).

Failures are this module's own exceptions, translated by :mod:`reef.api.upstream`:
:class:`ConnectFailed` (nothing was sent), :class:`TimedOut` (no connection within the
connect timeout, or no byte within the read timeout), :class:`ReplyBroken` (the
connection ended, or sent something unparseable, before the reply was whole). A
connection is reused only after a reply was read to its end with keep-alive, and never
after it sat idle for :data:`IDLE_SECONDS` (servers close idle connections after about
5 s; one closed while a request is on its way would fail it). The request asks for an
uncompressed reply; gzip or deflate sent anyway is decoded, anything else is refused.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import weakref
import zlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Final, cast
from urllib.parse import urlsplit

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from reef.core.errors import ReefError

#: an idle connection older than this is closed instead of reused
IDLE_SECONDS: Final = 2.0
#: reading pauses while this many bytes of a reply wait for the relay
_HIGH_WATER: Final = 1 << 18
_NO_BODY_STATUS: Final = frozenset({204, 304})


class HttpClientError(ReefError):
    """Base of this client's failures."""


class ConnectFailed(HttpClientError):
    """No connection (refused, unreachable, TLS failed): nothing was sent."""


class TimedOut(HttpClientError):
    """No connection within the connect timeout, or no byte within the read timeout."""


class ReplyBroken(HttpClientError):
    """The connection ended, or the reply could not be parsed, before it was whole."""


class Reply:
    """One reply: status and headers at once, the body read whole or chunk by chunk."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self.status: int = connection.status
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(connection.headers)
        # A reply dropped unreleased (a relay cancelled before it began) must still give
        # its slot back and close its connection, or the pool would run dry: done when
        # the reply is collected, in the loop's thread (collection may run in any thread)
        self._dropped = weakref.finalize(self, _finish_soon, asyncio.get_running_loop(), connection)

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_chunks()])

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (decoded if the server compressed them)."""
        connection = self._connection
        decoder = _decoder(self.headers.get("content-encoding"))
        while True:
            chunk = await connection.next_chunk()
            if chunk is None:
                if decoder is not None:
                    tail = decoder.flush()
                    if tail:
                        yield tail
                return
            if decoder is not None:
                try:
                    chunk = decoder.decompress(chunk)
                except zlib.error as exc:
                    raise ReplyBroken(f"undecodable body: {exc}") from exc
            if chunk:
                yield chunk

    def release(self) -> None:
        """Give the connection back to the pool (a reply read to its end) or close it."""
        self._dropped.detach()  # the connection may serve another request from now on
        self._connection.finish()


def _finish_soon(loop: asyncio.AbstractEventLoop, connection: _Connection) -> None:
    if not loop.is_closed():
        loop.call_soon_threadsafe(connection.finish)


class HttpClient:
    """Keep-alive connections to any number of origins, at most ``limit`` at once."""

    def __init__(
        self,
        *,
        limit: int,
        connect_timeout: float,
        read_timeout: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._slots = asyncio.Semaphore(limit)
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._idle: dict[tuple[str, str, int], deque[_Connection]] = {}
        #: how https origins are verified (None: the system's trusted authorities)
        self._tls = tls
        self._closed = False

    async def request(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None
    ) -> Reply:
        """Send one request; the reply once its status line and headers arrived. The
        caller reads the body and calls :meth:`Reply.release` (also after an error)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConnectFailed(f"not an http(s) URL: {url!r}")
        tls = parts.scheme == "https"
        host = parts.hostname
        port = parts.port or (443 if tls else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        authority = parts.netloc.rpartition("@")[2]
        lines = [f"{method} {target} HTTP/1.1", f"host: {authority}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if any("\r" in line or "\n" in line for line in lines):  # never split a request
            raise ConnectFailed("a header or the URL holds a line break: not sent")
        lines += ["accept-encoding: identity", f"content-length: {len(body or b'')}", "", ""]
        payload = "\r\n".join(lines).encode("latin-1") + (body or b"")
        await self._slots.acquire()
        try:
            connection = await self._connection((parts.scheme, host, port), tls)
        except BaseException:
            self._slots.release()
            raise
        connection.start(payload, self._read_timeout)
        try:
            await connection.wait_headers()
        except BaseException:
            connection.finish()
            raise
        return Reply(connection)

    async def _connection(self, origin: tuple[str, str, int], tls: bool) -> _Connection:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.reusable(now):
                return connection
            connection.close()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, protocol = await loop.create_connection(
                    lambda: _Connection(self, origin),
                    origin[1],
                    origin[2],
                    ssl=self._tls_context() if tls else None,
                    server_hostname=origin[1] if tls else None,
                )
        except TimeoutError as exc:
            raise TimedOut(f"connect to {origin[1]}:{origin[2]} timed out") from exc
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"cannot connect to {origin[1]}:{origin[2]}: {exc!r}") from exc
        return protocol

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def _returned(self, connection: _Connection, keep: bool) -> None:
        self._slots.release()
        if keep and not self._closed:
            self._idle.setdefault(connection.origin, deque()).append(connection)
        else:
            connection.close()

    async def close(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()


class _Connection(asyncio.Protocol):
    """One keep-alive connection, carrying one exchange at a time."""

    def __init__(self, client: HttpClient, origin: tuple[str, str, int]) -> None:
        self.client = client
        self.origin = origin
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._lost = False
        self._idle_since = 0.0
        self._timeout = 0.0
        self._paused = False
        self._finished = True
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: CIMultiDict[str] = CIMultiDict()
        self._headers_done = False
        self._complete = False
        self._failure: HttpClientError | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._until_close = False
        self._keep_alive = False

    # -- the client's side ----------------------------------------------------------

    def reusable(self, now: float) -> bool:
        return (
            not self._lost
            and self._transport is not None
            and not self._transport.is_closing()
            and now - self._idle_since < IDLE_SECONDS
        )

    def start(self, payload: bytes, read_timeout: float) -> None:
        self._reset()
        self._finished = False
        self._timeout = read_timeout
        if self._lost or self._transport is None:
            self._failure = ReplyBroken("the connection closed before the request was sent")
            return
        self._transport.write(payload)

    async def wait_headers(self) -> None:
        while not self._headers_done:
            await self._wait()

    async def next_chunk(self) -> bytes | None:
        """The next piece of the body, None at its end."""
        while not self._chunks:
            if self._complete:
                return None
            await self._wait()
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered < _HIGH_WATER // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return chunk

    async def _wait(self) -> None:
        if self._failure is not None:
            raise self._failure
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(self._timeout):
                await self._waiter
        except TimeoutError as exc:
            raise TimedOut(f"no reply within {self._timeout:g}s") from exc
        finally:
            self._waiter = None
        if self._failure is not None:
            raise self._failure

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        # a reply released before its buffered body was read may have paused reading:
        # such a connection would never hear its next reply, so it is closed
        keep = self._complete and self._failure is None and self._keep_alive
        keep = keep and not self._paused
        self._idle_since = time.monotonic()
        self.client._returned(self, keep and not self._lost)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, failure: HttpClientError) -> None:
        if self._failure is None and not self._complete:
            self._failure = failure
        self._wake()

    # -- asyncio.Protocol -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self._finished:  # nothing asked: a server talking out of turn is not reused
            self._lost = True
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ReplyBroken(f"unparseable reply: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self._until_close and exc is None and self._headers_done:
            self.on_message_complete()  # a body delimited by the end of the connection
            return
        self._fail(ReplyBroken(f"the connection closed mid-reply ({exc!r})"))

    # -- httptools callbacks ---------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.add(name.decode("latin-1"), value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        if 100 <= self.status < 200:  # an interim reply: the real one follows
            self.headers = CIMultiDict()
            return
        self._headers_done = True
        self._until_close = (
            "content-length" not in self.headers
            and "chunked" not in self.headers.get("transfer-encoding", "").lower()
            and self.status not in _NO_BODY_STATUS
        )
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self._headers_done:
            return  # the end of an interim reply
        self._complete = True
        self._keep_alive = self._parser.should_keep_alive()  # read while the message is current
        self._wake()


def _decoder(encoding: str | None) -> zlib._Decompress | None:
    """A decoder for a body the server compressed although asked not to."""
    if encoding is None or encoding.strip().lower() in ("", "identity"):
        return None
    name = encoding.strip().lower()
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if name == "deflate":
        return zlib.decompressobj()
    raise ReplyBroken(f"unsupported content-encoding {encoding!r}")
