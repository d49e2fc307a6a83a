"""Time to first byte and to the last byte of a streamed (SSE) reply, on one connection.

``wrk`` times whole replies; a stream's cost to an agent is also when its first token
arrives. This probe sends the same request over one keep-alive socket, sequentially, and
times the first byte of the body and the end of the chunked body (``0\\r\\n\\r\\n``). The
client is the same for every target, so "added" (target minus direct) is the server's.
"""

from __future__ import annotations

import json
import socket
import statistics
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

_END = b"\r\n0\r\n\r\n"


@dataclass(frozen=True)
class StreamTiming:
    ttfb_p50_ms: float
    ttfb_p99_ms: float
    total_p50_ms: float
    frames: int  # SSE events in one reply (for the per-chunk overhead)


def probe(
    url: str, headers: dict[str, str], body: dict[str, object], seconds: float
) -> StreamTiming:
    parts = urlsplit(url)
    payload = json.dumps(body).encode()
    head = [f"POST {parts.path} HTTP/1.1", f"Host: {parts.netloc}"]
    head += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + payload
    firsts: list[float] = []
    totals: list[float] = []
    frames = 0
    with socket.create_connection((parts.hostname, parts.port or 80)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline or len(totals) < 20:
            first, total, reply = _one(sock, request)
            firsts.append(first)
            totals.append(total)
            frames = reply.count(b"\n\n")
    return StreamTiming(
        _ms(statistics.median(firsts)),
        _ms(statistics.quantiles(firsts, n=100)[98]),
        _ms(statistics.median(totals)),
        frames,
    )


def _one(sock: socket.socket, request: bytes) -> tuple[float, float, bytes]:
    started = time.perf_counter()
    sock.sendall(request)
    buffer = b""
    first = 0.0
    while not buffer.endswith(_END):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection mid-reply")
        buffer += chunk
        if not first:
            head, sep, rest = buffer.partition(b"\r\n\r\n")
            if sep and rest:
                if not head.startswith(b"HTTP/1.1 200"):
                    raise ConnectionError(f"not a 200 reply: {head[:80]!r}")
                first = time.perf_counter() - started
    return first, time.perf_counter() - started, buffer


def _ms(seconds: float) -> float:
    return seconds * 1000.0
