"""The shared upstream client: what it carries from one caller's request to the next,
and how the library's failures reach Reef's error tree. A real loopback server answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from reef.api.upstream import Upstream
from reef.core.errors import RequestError, UpstreamBrokeError
from reef.settings import Settings
from reef.testing.servers import dead_url


async def _provider(seen: list[str | None]) -> TestServer:
    async def chat(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("cookie"))
        if request.query.get("mode") == "slow":
            await asyncio.sleep(2)
        if request.query.get("mode") == "redirect":  # not followed: the key stays here
            return web.Response(status=307, headers={"location": "/v1/elsewhere"})
        if request.query.get("mode") == "broken":  # a stream that ends mid-body
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            response.content_length = 1000
            await response.prepare(request)
            await response.write(b"data: {}\n\n")
            assert request.transport is not None
            request.transport.close()
            return response
        return web.json_response(
            {"ok": True}, headers={"set-cookie": "affinity=tenant-a; Path=/; Domain=127.0.0.1"}
        )

    async def elsewhere(request: web.Request) -> web.StreamResponse:
        seen.append("followed")
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/elsewhere", elsewhere)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


@pytest.fixture
async def provider() -> AsyncIterator[tuple[TestServer, list[str | None]]]:
    seen: list[str | None] = []
    server = await _provider(seen)
    try:
        yield server, seen
    finally:
        await server.close()


def _upstream(server: TestServer, **settings: float) -> Upstream:
    return _client(Settings.of(upstream_url=str(server.make_url("/v1")), **settings))


async def test_a_cookie_the_upstream_sets_never_rides_on_a_later_request(
    provider: tuple[TestServer, list[str | None]],
) -> None:
    server, seen = provider
    upstream = _upstream(server)
    try:
        for _ in range(2):
            request = upstream.build("POST", "/chat/completions", b"{}", {})
            response = await upstream.send(request, stream=False)
            assert response.status_code == 200
            assert response.json() == {"ok": True}
            assert response.headers["set-cookie"].startswith("affinity=")  # still relayed
    finally:
        await upstream.aclose()
    assert seen == [None, None]


async def test_a_refused_connection_is_502_unavailable() -> None:
    upstream = _client(Settings.of(upstream_url=dead_url()))
    try:
        request = upstream.build("POST", "/chat/completions", b"{}", {})
        with pytest.raises(RequestError) as caught:
            await upstream.send(request, stream=False)
    finally:
        await upstream.aclose()
    assert (caught.value.status, caught.value.code) == (502, "upstream_unavailable")


async def test_a_reply_slower_than_the_read_timeout_is_504(
    provider: tuple[TestServer, list[str | None]],
) -> None:
    server, _ = provider
    upstream = _upstream(server, upstream_read_timeout_s=0.2)
    try:
        request = upstream.build("POST", "/chat/completions?mode=slow", b"{}", {})
        with pytest.raises(RequestError) as caught:
            await upstream.send(request, stream=False)
    finally:
        await upstream.aclose()
    assert (caught.value.status, caught.value.code) == (504, "upstream_timeout")


async def test_a_stream_that_breaks_off_raises_upstream_broke(
    provider: tuple[TestServer, list[str | None]],
) -> None:
    server, _ = provider
    upstream = _upstream(server)
    try:
        request = upstream.build("POST", "/chat/completions?mode=broken", b"{}", {})
        reply = await upstream.send(request, stream=True)
        chunks: list[bytes] = []
        with pytest.raises(UpstreamBrokeError):
            async for chunk in reply.aiter_bytes():
                chunks.append(chunk)
        await reply.aclose()
    finally:
        await upstream.aclose()
    assert b"".join(chunks) == b"data: {}\n\n"


async def test_a_redirect_is_relayed_not_followed(
    provider: tuple[TestServer, list[str | None]],
) -> None:
    server, seen = provider
    upstream = _upstream(server)
    try:
        request = upstream.build("POST", "/chat/completions?mode=redirect", b"{}", {})
        response = await upstream.send(request, stream=False)
    finally:
        await upstream.aclose()
    assert response.status_code == 307 and response.headers["location"] == "/v1/elsewhere"
    assert "followed" not in seen


def _client(settings: Settings) -> Upstream:
    return Upstream(settings.upstream, settings.recording)
