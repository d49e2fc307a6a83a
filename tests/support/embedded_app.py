"""``reef serve --log embedded`` in the test's own process, for synchronous API tests.

:class:`EmbeddedApp` runs, on an event loop of its own (anyio's blocking portal: a
thread), what an embedded ``reef serve`` runs: the app :func:`reef.wiring.create_app`
builds, through its lifespan, as an API process; beside it the embedded processors
(join, release chain, sessions, ...) hosted by the function ``reef streams --log
embedded`` runs (:func:`reef.hosts.worker.run_embedded_processors`); and, unless an
upstream URL is given, the scripted provider (:mod:`reef.testing.scripted_upstream`) on
a loopback socket. No trainer, judge or local engine runs here: what needs them (a recipe
that trains, judged turns, no upstream) needs a real ``reef serve`` (tests/e2e).

Settings come from the same flags and ``REEF_*`` variables a ``reef serve`` would be
given (:func:`reef.settings.load_settings`). Tests talk to the app with httpx over
``httpx.ASGITransport`` (:meth:`EmbeddedApp.client`), or with the official SDKs over a
loopback socket (:attr:`EmbeddedApp.base_url`: uvicorn on the same loop), and read its
log with a reader of their own, as they read a server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fastapi import FastAPI

from reef.api.context import AppContext
from reef.artifacts import ClaimCheck, open_store
from reef.core.events import Event
from reef.hosts.worker import run_embedded_processors
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.settings import Settings, load_settings
from reef.testing.scripted_upstream import make_app
from reef.testing.servers import ScriptedUpstreamLog
from reef.wiring import create_app, readable_store
from tests.support.in_process import serving
from tests.support.reef_server import API_TOPICS, Offsets, RecordedEvents, server_env

#: how long a request may take before the client gives up, unless the client says
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class ScriptedProvider(ScriptedUpstreamLog):
    """The scripted provider an app relays to, on a loopback socket in this process."""

    base_url: str


class AppTransport(httpx.BaseTransport):
    """httpx's ASGI transport for a synchronous client: each request runs on the app's
    loop (through its portal) and comes back read in full. A body given as an iterator
    is read on the caller's thread first; the client's read timeout still applies."""

    def __init__(self, app: FastAPI, portal: BlockingPortal) -> None:
        self._asgi = httpx.ASGITransport(app=app)
        self._portal = portal

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        timeout = request.extensions.get("timeout", {}).get("read")
        try:
            return self._portal.call(self._send, request, timeout)
        except TimeoutError as exc:
            raise httpx.ReadTimeout(f"no answer within {timeout} s", request=request) from exc

    async def _send(self, request: httpx.Request, timeout: float | None) -> httpx.Response:
        async with asyncio.timeout(timeout):
            answered = await self._asgi.handle_async_request(request)
            content = b"".join([part async for part in answered.stream])  # type: ignore[union-attr]
        return httpx.Response(answered.status_code, headers=answered.headers, content=content)


@dataclass
class _Running:
    app: FastAPI
    ctx: AppContext
    base_url: str
    provider: ScriptedProvider | None
    processors: asyncio.Task[None]


@contextlib.asynccontextmanager
async def _hosted_processors(settings: Settings) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(run_embedded_processors(settings), name="processors")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def _running(
    settings_for: Callable[[str], Settings], upstream_url: str | None
) -> AsyncIterator[_Running]:
    """Provider, app (through its lifespan), processors, socket; stopped in reverse."""
    async with contextlib.AsyncExitStack() as stack:
        provider = None
        if upstream_url is None:
            provider = ScriptedProvider(await stack.enter_async_context(serving(make_app())))
            upstream_url = provider.v1_url
        settings = settings_for(upstream_url)
        app = create_app(settings.replace(serve_role="api"))
        await stack.enter_async_context(app.router.lifespan_context(app))
        processors = await stack.enter_async_context(_hosted_processors(settings))
        base_url = await stack.enter_async_context(serving(app))
        yield _Running(app, app.state.ctx, base_url, provider, processors)


class EmbeddedApp(RecordedEvents):
    """One in-process embedded deployment (see the module's docstring); :meth:`stop` it,
    or use :func:`running_app`."""

    POLL_S = 0.05

    kind = "embedded"

    def __init__(
        self,
        state_dir: Path,
        *,
        dialect: str = "openai",
        token: str | None = "",
        tokens: str | None = None,
        upstream_url: str | None = None,
        flags: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``token=""`` makes a random token, None none; ``flags``: flat setting names, as
        ``reef serve``'s flags give them; ``env``: more ``REEF_*`` variables."""
        self.state_dir = state_dir
        self.dialect = dialect
        self.token = f"reef-tok-{secrets.token_hex(8)}" if token == "" else token
        self.upstream_key = f"sk-upstream-{secrets.token_hex(8)}"
        environ = server_env(
            token=self.token, tokens=tokens, upstream_key=self.upstream_key, extra=env
        )
        given = {"state_dir": state_dir, "log": "embedded", "upstream_dialect": dialect}

        def settings_for(url: str) -> Settings:
            values = {**given, "upstream_url": url, **(flags or {})}
            return load_settings(values, environ=environ).settings

        self._stack = contextlib.ExitStack()
        self.portal = self._stack.enter_context(start_blocking_portal("asyncio"))
        try:
            running = _running(settings_for, upstream_url)
            self._running = self._stack.enter_context(
                self.portal.wrap_async_context_manager(running)
            )
        except BaseException:
            self._stack.close()
            raise
        self.settings: Settings = self._running.ctx.settings
        self.stopped = False

    # -- talking to it -----------------------------------------------------------

    @property
    def ctx(self) -> AppContext:
        """The running app's context (what its handlers use)."""
        return self._running.ctx

    @property
    def upstream(self) -> ScriptedProvider | None:
        return self._running.provider

    @property
    def base_url(self) -> str:
        """The app on a loopback socket (for clients that bring their own HTTP client)."""
        return self._running.base_url

    @property
    def v1_url(self) -> str:
        return f"{self.base_url}/v1"

    def headers(self, scenario: str | None = None, token: str | None = None) -> dict[str, str]:
        out: dict[str, str] = {}
        chosen = token if token is not None else self.token
        if chosen is not None:
            out["Authorization"] = f"Bearer {chosen}"
        if scenario is not None:
            out["x-reef-scenario"] = scenario
        return out

    def client(
        self,
        scenario: str | None = None,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> httpx.Client:
        """An httpx client over the ASGI transport, with the token (``token`` or the
        app's) and the scenario header."""
        return self.bare_client(timeout, self.headers(scenario, token))

    def bare_client(
        self, timeout: float = DEFAULT_TIMEOUT_S, headers: Mapping[str, str] | None = None
    ) -> httpx.Client:
        """An httpx client over the ASGI transport sending only ``headers``."""
        return httpx.Client(
            transport=AppTransport(self._running.app, self.portal),
            base_url="http://reef",
            headers=dict(headers or {}),
            timeout=timeout,
        )

    # -- its log -------------------------------------------------------------------

    def _claims(self) -> ClaimCheck:
        return ClaimCheck(open_store(self.settings), self.settings.artifacts.claim_check_bytes)

    def events(self, topic: str, scenario: str | None = None) -> list[Event]:
        """Decoded events of a topic, bodies opened (an undecodable one fails)."""

        async def read() -> list[Event]:
            log = EmbeddedLog(self.state_dir / "log.sqlite3")
            try:
                async with readable_store(log, self._claims()) as store:
                    found = []
                    async for stored in store.read(topic, scenario=scenario):
                        assert stored.event is not None, f"undecodable record: {stored.error}"
                        found.append(stored.event)
                    return found
            finally:
                await log.close()

        return asyncio.run(read())

    def end_offsets(self, topics: Sequence[str] = API_TOPICS) -> Offsets:
        """End offsets of ``topics`` (by default those the API writes)."""

        async def read() -> Offsets:
            log = EmbeddedLog(self.state_dir / "log.sqlite3")
            try:
                return {topic: await log.end_offsets(topic) for topic in topics}
            finally:
                await log.close()

        return asyncio.run(read())

    def append(self, *events: Event) -> None:
        """Append ``events`` as another writer on the log would (a trainer, a tool)."""

        async def write() -> None:
            log = EmbeddedLog(self.state_dir / "log.sqlite3")
            await log.start()
            try:
                await EventStore(log).append_all(list(events))
            finally:
                await log.close()

        asyncio.run(write())

    def assert_nothing_written(self, before: Offsets) -> None:
        """The log's end offsets are what they were (a short settle first)."""
        time.sleep(0.1)
        after = self.end_offsets(list(before))
        assert after == before, f"the log changed: before={before} after={after}"

    def raw_log_bytes(self) -> bytes:
        """Every byte of the state dir's files (the log's SQLite files among them)."""
        return b"".join(p.read_bytes() for p in sorted(self.state_dir.rglob("*")) if p.is_file())

    # -- its life --------------------------------------------------------------------

    def failure(self) -> BaseException | None:
        """What stopped the processors, if they stopped while the app runs."""
        if self.stopped:
            return None
        return self.portal.call(self._processors_failure)

    def _processors_failure(self) -> BaseException | None:
        task = self._running.processors
        if not task.done() or task.cancelled():
            return None
        return task.exception() or RuntimeError("the embedded processors returned")

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self._stack.close()


AppFactory = Callable[..., EmbeddedApp]
"""Starts an :class:`EmbeddedApp` (keywords of its constructor; ``state_dir`` optional)."""


@contextlib.contextmanager
def running_app(state_dir: Path, **options: Any) -> Iterator[EmbeddedApp]:
    """An :class:`EmbeddedApp` for the block (keywords of its constructor)."""
    app = EmbeddedApp(state_dir, **options)
    try:
        yield app
    finally:
        app.stop()
