"""Reef's app and the scripted provider in the test's own event loop, no processes.

``serving(app)`` runs an ASGI app on a loopback port with uvicorn (Reef's upstream client
speaks real HTTP, so the provider needs a socket); ``reef_api(settings)`` runs the app
``reef serve`` builds (:func:`reef.wiring.create_app`) through its lifespan, as an
API-only process on the embedded log, and yields a client over ``httpx.ASGITransport``
with the running :class:`~reef.api.context.AppContext`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn

from reef.api.context import AppContext
from reef.settings import Settings
from reef.wiring import create_app

START_SECONDS = 10.0


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """``app`` served on 127.0.0.1 until the block ends; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(START_SECONDS):
            while not server.started:
                if task.done():
                    task.result()  # raises what stopped it
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@contextlib.asynccontextmanager
async def reef_api(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, AppContext]]:
    """The API of ``settings`` (an API-only process: no processors, trainer or engine)."""
    app = create_app(settings.replace(serve_role="api", log="embedded"))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://reef") as client:
            yield client, app.state.ctx
