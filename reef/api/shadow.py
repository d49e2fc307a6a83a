"""The shadow copies of one API process: sent in the background, owned, bounded.

What a copy is and why is :mod:`reef.core.shadow`; this module sends them. Order of work
for one copy, in its own task (:meth:`ShadowCopies.start` returns at once):

1. The candidate's system prompt, when it is a harness release: read from its content
   (the manifest, then ``system_prompt.md`` alone, never a weight file), cached by
   content id (content is immutable).
2. The buffered copy (:func:`reef.core.shadow.buffered_copy`) goes to the upstream with
   ``x-reef-serve-release`` naming the candidate (Reef's engine answers from its
   candidate slot; another provider ignores the header).
3. Its ``InferenceRecorded`` (``shadow_of`` the served receipt, id
   :func:`reef.core.shadow.shadow_receipt`) is appended: complete with the candidate's
   answer, or incomplete with the error when the upstream failed. Sealed like any record.
   The weights an engine reports (``x-weight-version``, or in the body) are recorded as
   for any exchange: ``served_release_id`` when they are a release of the scenario, so a
   copy an engine answered without the candidate's slot is known (the controller does
   not count it).

Nothing a copy raises reaches anyone: an upstream or content error is recorded (step 3);
a log error loses the record (logged), as a crash between steps 2 and 3 would. At most
``limit`` copies are in flight; a copy beyond that is not sent (``dropped`` counts them)
rather than queued, so a slow candidate can never build up memory or delay the head.
:meth:`ShadowCopies.close` (the app's shutdown, through ``AppContext.drain``) waits up
to ``grace`` seconds for the copies in flight, then cancels the rest: a cancelled copy
records nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from reef.api.adapters import AdapterKinds
from reef.api.dialects import usage_of
from reef.api.upstream import Upstream
from reef.artifacts.content import ContentStore
from reef.artifacts.parts import harness_part
from reef.core import routing, shadow
from reef.core.cost import NO_USAGE, Usage, exchange_cost
from reef.core.errors import ReefError
from reef.core.events import InferenceRecorded, utc_now
from reef.services.eventstore import EventStore
from reef.services.projection import ProjectionFollower, ReleaseView
from reef.settings import Settings

logger = logging.getLogger(__name__)

#: system prompts remembered, by content id
PROMPTS_KEPT: Final = 64


class ShadowContext(Protocol):
    """What a copy uses of the app's context (:class:`reef.api.context.AppContext`)."""

    @property
    def producer(self) -> str: ...
    @property
    def store(self) -> EventStore: ...
    @property
    def upstream(self) -> Upstream: ...
    @property
    def content(self) -> ContentStore: ...
    @property
    def projection(self) -> ProjectionFollower: ...
    @property
    def adapters(self) -> AdapterKinds: ...
    @property
    def settings(self) -> Settings: ...


@dataclass(frozen=True, slots=True)
class ShadowRequest:
    """What a copy needs of the served exchange, taken before its request ends."""

    served_receipt: str
    scenario: str
    route: str
    dialect: str
    candidate_release_id: str
    body: dict[str, Any]
    headers: Mapping[str, str]
    tags: Mapping[str, str]
    model: str | None


class ShadowCopies:
    """The copies in flight in this process (see the module docstring)."""

    def __init__(self, *, limit: int = 64, grace_s: float = 10.0) -> None:
        self.limit = limit
        self.grace_s = grace_s
        self.dropped = 0
        self.sent = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._prompts: dict[str, str | None] = {}

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def start(self, ctx: ShadowContext, request: ShadowRequest) -> None:
        """Send the copy in the background; never waits, never raises."""
        if len(self._tasks) >= self.limit:
            self.dropped += 1
            return
        self.sent += 1
        task = asyncio.create_task(
            self._copy(ctx, request), name=f"shadow:{request.served_receipt}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:  # a bug, not a failure
            logger.error("shadow copy %s failed", task.get_name(), exc_info=task.exception())

    async def close(self) -> None:
        """Wait up to ``grace_s`` for the copies in flight, then cancel the rest."""
        if not self._tasks:
            return
        _, late = await asyncio.wait(set(self._tasks), timeout=self.grace_s)
        for task in late:
            task.cancel()
        for task in late:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # a task that ended while an earlier one was awaited has its done-callback still
        # queued: once closed, none is in flight, whatever the callbacks' order
        self._tasks.difference_update(late)

    async def _copy(self, ctx: ShadowContext, request: ShadowRequest) -> None:
        started = time.perf_counter()
        try:
            record = await self._answered(ctx, request, started)
        except ReefError as exc:  # the candidate failed to answer: recorded against it
            record = _record(ctx, request, started, status=502, error=f"shadow copy failed: {exc}")
        try:
            await ctx.store.append(record)
        except ReefError:
            logger.exception("shadow record of %s lost", request.served_receipt)

    async def _answered(
        self, ctx: ShadowContext, request: ShadowRequest, started: float
    ) -> InferenceRecorded:
        prompt = await self._system_prompt(ctx, request)
        body = shadow.buffered_copy(request.body, request.route, prompt)
        adapter = await self._adapter(ctx, request)
        if adapter is not None:  # SGLang's field, as for a served exchange
            body["lora_path"] = adapter
        suffix = request.route.removeprefix("/v1")
        upstream_request = ctx.upstream.build(
            "POST", suffix, json.dumps(body).encode(), request.headers
        )
        upstream_request.headers[routing.SERVE_RELEASE_HEADER] = request.candidate_release_id
        reply = await ctx.upstream.send(upstream_request, stream=False)
        text = reply.content.decode("utf-8", errors="replace")
        parsed = _json_object(text)
        version = reply.headers.get(routing.WEIGHT_VERSION_HEADER) or _body_version(parsed)
        known = {r.release_id for r in _releases(ctx, request.scenario)}
        failed = reply.status_code >= 400
        return _record(
            ctx,
            request,
            started,
            status=reply.status_code,
            error=f"upstream answered {reply.status_code}" if failed else None,
            sent=body,
            response=text,
            usage=NO_USAGE if parsed is None else usage_of(parsed),
            version=version,
            served_release_id=version if version in known else None,
        )

    async def _adapter(self, ctx: ShadowContext, request: ShadowRequest) -> str | None:
        """The candidate's adapter name when its weights are one (reef.api.adapters)."""
        content_id = _candidate_content(ctx, request)
        if content_id is None:
            return None
        return await ctx.adapters.adapter_of(
            request.route, request.candidate_release_id, content_id
        )

    async def _system_prompt(self, ctx: ShadowContext, request: ShadowRequest) -> str | None:
        content_id = _candidate_content(ctx, request)
        if content_id is None:
            return None
        if content_id not in self._prompts:
            if len(self._prompts) >= PROMPTS_KEPT:
                self._prompts.clear()
            self._prompts[content_id] = await asyncio.to_thread(_read_prompt, ctx, content_id)
        return self._prompts[content_id]


def _candidate_content(ctx: ShadowContext, request: ShadowRequest) -> str | None:
    return next(
        (
            r.content_id
            for r in _releases(ctx, request.scenario)
            if r.release_id == request.candidate_release_id
        ),
        None,
    )


def _releases(ctx: ShadowContext, scenario: str) -> list[ReleaseView]:
    view = ctx.projection.state.scenarios.get(scenario)
    return [] if view is None else view.releases


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _body_version(parsed: dict[str, Any] | None) -> str | None:
    """The weight version an engine reports in its body (``weight_version``, or SGLang's
    ``meta_info``), when the header did not carry it."""
    if parsed is None:
        return None
    meta = parsed.get("meta_info")
    found = parsed.get("weight_version") or (
        meta.get("weight_version") if isinstance(meta, dict) else None
    )
    return found if isinstance(found, str) and found else None


def _read_prompt(ctx: ShadowContext, content_id: str) -> str | None:
    """The harness part's ``system_prompt.md`` of a release, or None (a model release)."""
    entry = harness_part(ctx.content.load(content_id)).get(shadow.SYSTEM_PROMPT_FILE)
    if entry is None:
        return None
    try:
        return ctx.content.store.get_bytes(entry.oid).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _record(
    ctx: ShadowContext,
    request: ShadowRequest,
    started: float,
    *,
    status: int,
    error: str | None = None,
    sent: dict[str, Any] | None = None,
    response: str | None = None,
    usage: Usage = NO_USAGE,
    version: str | None = None,
    served_release_id: str | None = None,
) -> InferenceRecorded:
    latency_ms = (time.perf_counter() - started) * 1000
    return InferenceRecorded(
        event_id=shadow.shadow_receipt(request.served_receipt),
        scenario=request.scenario,
        occurred_at=utc_now(),
        producer=ctx.producer,
        dialect=request.dialect,
        route=request.route,
        release_id=request.candidate_release_id,
        served_release_id=served_release_id,
        weight_version=version,
        model=request.model,
        stream=False,
        status=status,
        complete=error is None,
        error=error,
        request_json=json.dumps(sent if sent is not None else request.body),
        response_json=response,
        latency_ms=latency_ms,
        upstream_latency_ms=latency_ms,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=usage.cache_read_tokens,
        cache_creation_input_tokens=usage.cache_write_tokens,
        cost_usd=exchange_cost(request.model, usage, ctx.settings.recording.prices),
        tags=dict(request.tags),
        shadow_of=request.served_receipt,
    )
