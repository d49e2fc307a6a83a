"""The inference routes: serve a provider-native request, record it, hand back a receipt.

Order for every exchange: authenticate → validate → bind the scenario → freeze the release
that serves it (a pinned one, else the head, or during a rollout the arm its routing key
draws) → call upstream → append InferenceRecorded and wait for the log's acknowledgement
→ only then return the receipt (and, in a shadow rollout, send the candidate its copy
in the background: :mod:`reef.api.shadow`). If the append fails the client gets 503 and
no receipt; an upstream failure is relayed and writes nothing.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from reef.api import raw_json, registry
from reef.api.context import AppContext, context_of
from reef.api.dialects import (
    Dialect,
    SseSplitter,
    StreamAssembly,
    error_body,
    is_terminal,
    parse_event,
    receipt_frames,
    usage_of,
)
from reef.api.inputs import TAG_PREFIX, read_body, scenario_header
from reef.api.pins import pinned_release
from reef.api.shadow import ShadowRequest
from reef.api.tags import exchange_tags
from reef.api.upstream import UpstreamReply, relayed_status
from reef.core import agent_headers, fingerprints, routing, shadow
from reef.core.cost import NO_USAGE, Usage, exchange_cost
from reef.core.errors import LogUnavailableError, RequestError, UpstreamBrokeError
from reef.core.events import InferenceRecorded, utc_now
from reef.core.ids import new_receipt
from reef.observability.tracing import ExchangeSpan
from reef.services.projection import ApiState, ScenarioView
from reef.settings import Settings

router = APIRouter()

RECEIPT_HEADER = "x-reef-agent-record-id"
RELEASE_HEADER = "x-reef-release-id"
WEIGHT_VERSION_HEADER = routing.WEIGHT_VERSION_HEADER
RELEASE_ID = re.compile(r"[0-9a-f]{32}")
VERSION_WAIT_SECONDS = 2.0
#: the request members Reef may set before relaying (the forced model, the token record)
SET_MEMBERS: Final = ("model", "logprobs", "top_logprobs")


@dataclass(slots=True)
class Exchange:
    """One inference in flight: what was asked, under which release, since when."""

    receipt: str
    scenario: str
    route: str
    dialect: str
    release_id: str
    request_json: str
    model: str | None
    stream: bool
    tags: dict[str, str]
    started: float
    upstream_started: float = 0.0
    upstream_done: float = 0.0
    #: the scenario's releases, to recognise an engine's weight version as one of them
    releases: frozenset[str] = frozenset()
    weight_version: str | None = None
    #: what session matching reads instead of the sealed bodies (reef.core.fingerprints)
    fingerprint_key: bytes | None = None
    message_fingerprints: list[str] | None = None
    has_tools: bool | None = None
    #: the copy a shadow rollout's candidate answers once this exchange is recorded
    shadow: ShadowRequest | None = None
    #: its span, when tracing is on (reef.observability.tracing)
    span: ExchangeSpan | None = None

    def copy_to_shadow(self, ctx: AppContext) -> None:
        """After the record is durable: the candidate's copy leaves in the background."""
        if self.shadow is not None:
            ctx.shadows.start(ctx, self.shadow)

    async def observe_version(self, version: object, ctx: AppContext) -> None:
        """The engine's reported weight version (SGLang/local engines; None elsewhere).

        A version committed after the request arrived is looked up again in the
        projection (waiting briefly for it to catch up with the sidecar, which loads
        releases as soon as they are committed), so a receipt names the release that
        answered, not the frozen one.
        """
        if not isinstance(version, str) or not version:
            return
        self.weight_version = version
        if version in self.releases or not RELEASE_ID.fullmatch(version):
            return
        scenario = self.scenario

        def knows(state: ApiState) -> bool:
            view = state.scenarios.get(scenario)
            return view is not None and any(r.release_id == version for r in view.releases)

        await ctx.projection.wait_until(knows, VERSION_WAIT_SECONDS)
        view = ctx.projection.state.scenarios.get(scenario)
        if view is not None:
            self.releases = frozenset(r.release_id for r in view.releases)

    @property
    def served_release_id(self) -> str | None:
        """The release the engine actually used, when its weight version names one."""
        return self.weight_version if self.weight_version in self.releases else None

    @property
    def receipt_release(self) -> str:
        return self.served_release_id or self.release_id

    def record(
        self,
        ctx: AppContext,
        *,
        status: int,
        complete: bool,
        response: str | None,
        usage: Usage = NO_USAGE,
        error: str | None = None,
    ) -> InferenceRecorded:
        now = time.perf_counter()
        return InferenceRecorded(
            event_id=self.receipt,
            scenario=self.scenario,
            occurred_at=utc_now(),
            producer=ctx.producer,
            dialect=self.dialect,
            route=self.route,
            release_id=self.release_id,
            served_release_id=self.served_release_id,
            weight_version=self.weight_version,
            model=self.model,
            stream=self.stream,
            status=status,
            complete=complete,
            error=error,
            request_json=self.request_json,
            response_json=response,
            latency_ms=(now - self.started) * 1000,
            upstream_latency_ms=((self.upstream_done or now) - self.upstream_started) * 1000,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_input_tokens=usage.cache_read_tokens,
            cache_creation_input_tokens=usage.cache_write_tokens,
            cost_usd=exchange_cost(self.model, usage, ctx.settings.recording.prices),
            tags=self.tags,
            message_fingerprints=self.message_fingerprints,
            answer_fingerprint=_answer_fingerprint(self.fingerprint_key, response),
            has_tools=self.has_tools,
        )


def _fingerprint_key(ctx: AppContext, scenario: str) -> bytes | None:
    """The scenario's fingerprint key; None (nothing fingerprinted, no cost on the request
    path) unless the deployment tracks or merges sessions (``track_sessions``,
    ``merge_sessions``): both compare messages by these fingerprints."""
    if not (ctx.settings.sessions.track or ctx.settings.join.merge_sessions):
        return None
    secret = ctx.settings.sessions.fingerprint_secret
    key_material = secret.get_secret_value().encode() if secret else b""
    return fingerprints.scenario_key(key_material, scenario)


def _answer_fingerprint(key: bytes | None, response: str | None) -> str | None:
    if key is None:
        return None
    try:
        parsed = json.loads(response) if response else None
    except ValueError:
        return None
    return fingerprints.answer_fingerprint(key, parsed)


#: the recorded routes and their dialects (reef.api.hot_routes dispatches them first)
INFERENCE_ROUTES: Final = {
    "/v1/chat/completions": Dialect.OPENAI,
    "/v1/responses": Dialect.OPENAI,
    "/v1/messages": Dialect.ANTHROPIC,
    "/v1/messages/count_tokens": Dialect.ANTHROPIC,
}


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    """OpenAI chat completions, recorded.

    curl -H "Authorization: Bearer $REEF_TOKEN" -H "x-reef-scenario: demo" \\
      -d '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}' \\
      http://127.0.0.1:8900/v1/chat/completions
    """
    return await serve(request, "/v1/chat/completions", Dialect.OPENAI)


@router.post("/v1/responses")
async def responses(request: Request) -> Response:
    """OpenAI Responses API, recorded (a stream's receipt rides on its final event:
    ``response.completed``, ``.incomplete`` or ``.failed``)."""
    return await serve(request, "/v1/responses", Dialect.OPENAI)


@router.post("/v1/messages")
async def messages(request: Request) -> Response:
    """Anthropic messages, recorded.

    curl -H "x-api-key: $REEF_TOKEN" -H "x-reef-scenario: demo" \\
      -d '{"model": "claude-x", "max_tokens": 64,
           "messages": [{"role": "user", "content": "hi"}]}' \\
      http://127.0.0.1:8900/v1/messages
    """
    return await serve(request, "/v1/messages", Dialect.ANTHROPIC)


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> Response:
    """Anthropic token counting, recorded like any exchange."""
    return await serve(request, "/v1/messages/count_tokens", Dialect.ANTHROPIC)


@router.get("/v1/models")
async def models(request: Request) -> Response:
    """The upstream's model list (not recorded: no exchange with a model happened)."""
    ctx = context_of(request)
    ctx.authenticate(request, "inference")
    upstream_request = ctx.upstream.build("GET", "/models", None, request.headers)
    upstream_response = await ctx.upstream.send(upstream_request, stream=False)
    if upstream_response.status_code >= 400:
        return _relay_error(upstream_response, Dialect.OPENAI)
    return Response(upstream_response.content, media_type="application/json")


#: the client's own session tag
SESSION_TAG_HEADER: Final = f"{TAG_PREFIX}session"


def _session_of(request: Request, scenario: str, route: str) -> tuple[str, str, str]:
    """Whose latest request this one is read against (:mod:`reef.api.rereading`): its
    session as a header names it (the client's session tag, else its agent's), else the
    route's latest request in the scenario. A wrong guess costs a whole parse."""
    get = request.headers.get
    session = get(SESSION_TAG_HEADER) or agent_headers.agent_tags(get).get("session", "")
    return scenario, route, session


def _ask_token_record(body: dict[str, Any], settings: Settings) -> bool:
    """Ask a chat request for the token record the settings want; True if it changed.

    SGLang and reef engine answer ``logprobs`` with ``meta_info`` (ids, logprobs) and
    ``top_logprobs`` with the top-K ids per generated token; a client's own choice stands.
    """
    top = settings.recording.top_logprobs
    changed = False
    if (settings.recording.tokens or top) and "logprobs" not in body:
        body["logprobs"] = True
        changed = True
    if top and body.get("logprobs") is True and "top_logprobs" not in body:
        body["top_logprobs"] = top
        changed = True
    return changed


def routed(state: ApiState, scenario: str, tags: dict[str, str], receipt: str) -> routing.Route:
    """Who answers an unpinned exchange: the head, or during a rollout the arm
    :func:`reef.core.routing.route` draws for its routing key (the session tag, else the
    receipt), with the shadow release of a shadow rollout. Without a rollout this is two
    look-ups: no hashing."""
    book = state.rollouts
    rollouts = book.scenario(scenario)
    current = None if rollouts is None else rollouts.current
    head = routing.Route("head", state.scenarios[scenario].head)
    if current is None or current.status not in ("active", "promoted"):
        return head
    chosen = routing.route(scenario, routing.routing_key(tags.get("session"), receipt), book)
    return head if chosen is None else chosen


def _shadow_request(
    request: Request, exchange: Exchange, body: dict[str, Any], candidate: str | None
) -> ShadowRequest | None:
    """The copy of this exchange a shadow candidate answers (reef.core.shadow, rule 1)."""
    if candidate is None or exchange.route in shadow.NOT_COPIED:
        return None
    return ShadowRequest(
        served_receipt=exchange.receipt,
        scenario=exchange.scenario,
        route=exchange.route,
        dialect=exchange.dialect,
        candidate_release_id=candidate,
        body=body,
        headers=dict(request.headers),
        tags=exchange.tags,
        model=exchange.model,
    )


async def _adapter_of(
    ctx: AppContext, route: str, view: ScenarioView, release_id: str
) -> str | None:
    """The adapter to name in SGLang's ``lora_path`` for an exchange routed to
    ``release_id`` (:mod:`reef.api.adapters`); the recorded request stays the client's."""
    found = next((r for r in view.releases if r.release_id == release_id), None)
    if found is None:
        return None
    return await ctx.adapters.adapter_of(route, release_id, found.content_id)


async def serve(request: Request, route: str, dialect: Dialect) -> Response:
    ctx = context_of(request)
    if ctx.tracing is None:
        return await _serve(request, ctx, route, dialect, None)
    span = ctx.tracing.exchange(request.headers, route)
    try:
        response = await _serve(request, ctx, route, dialect, span)
    except BaseException as exc:
        span.failed(exc)
        raise
    if not isinstance(response, StreamingResponse):  # a stream's span ends when it is recorded
        span.answered(response.status_code)  # no-op once recorded
    return response


async def _serve(
    request: Request, ctx: AppContext, route: str, dialect: Dialect, span: ExchangeSpan | None
) -> Response:
    started = time.perf_counter()
    principal = ctx.authenticate(request, "inference")
    scenario = scenario_header(request)
    principal.require_scenario(scenario)
    raw = await read_body(request, ctx.settings.api.max_body_bytes)
    text, body = ctx.requests.read(_session_of(request, scenario, route), raw)
    changed = False
    if ctx.upstream.model:
        body["model"] = ctx.upstream.model
        changed = True
    if route == "/v1/chat/completions":
        changed = _ask_token_record(body, ctx.settings) or changed
    if changed:  # only the members Reef sets: the client's other bytes reach the provider
        raw = raw_json.with_members(raw, {k: body[k] for k in SET_MEMBERS if k in body})
        text = raw.decode()
    pinned = pinned_release(request, ctx, scenario)
    view, _ = await registry.ensure(ctx, scenario)
    key = _fingerprint_key(ctx, scenario)
    receipt = new_receipt(scenario)
    tags = exchange_tags(
        request,
        body,
        agent_sessions=ctx.settings.api.agent_session_headers,
        classify=ctx.settings.sessions.track,
    )
    chosen = routed(ctx.projection.state, scenario, tags, receipt)
    exchange = Exchange(
        receipt=receipt,
        scenario=scenario,
        route=route,
        dialect=dialect.value,
        release_id=pinned or chosen.release_id,
        request_json=text,
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        stream=body.get("stream") is True,
        tags=tags,
        started=started,
        releases=frozenset(r.release_id for r in view.releases),
        fingerprint_key=key,
        message_fingerprints=None if key is None else fingerprints.request_fingerprints(key, body),
        has_tools=None if key is None else fingerprints.has_tools(body),
    )
    if pinned is None:
        exchange.shadow = _shadow_request(request, exchange, body, chosen.shadow_release_id)
    # with body_format blocks the request's new blocks are stored while the upstream answers
    ctx.store.prepare_request(scenario, receipt, tags, exchange.request_json, raw=raw, parsed=body)
    adapter = await _adapter_of(ctx, route, view, exchange.release_id)
    forwarded = raw if adapter is None else raw_json.with_members(raw, {"lora_path": adapter})
    upstream_request = ctx.upstream.build(
        "POST", route.removeprefix("/v1"), forwarded, request.headers
    )
    if exchange.release_id != view.head or adapter is not None:
        # Reef's engine: the routed release's slot or adapter when loaded, else the
        # default weights (a release the sidecar has not loaded yet: reef.engine.model)
        upstream_request.headers[routing.SERVE_RELEASE_HEADER] = exchange.release_id
    if span is not None:
        exchange.span = span
        span.describe(
            route,
            scenario=scenario,
            receipt=receipt,
            release=exchange.release_id,
            model=exchange.model,
        )
        span.inject(upstream_request.headers)
    exchange.upstream_started = time.perf_counter()
    upstream_response = await ctx.upstream.send(upstream_request, stream=exchange.stream)
    request.app.state.metrics.upstream_seconds.labels(route).observe(
        time.perf_counter() - exchange.upstream_started
    )
    await exchange.observe_version(upstream_response.headers.get(WEIGHT_VERSION_HEADER), ctx)
    if upstream_response.status_code >= 400:
        try:
            await upstream_response.aread()  # a no-op unless a stream was asked for
        except UpstreamBrokeError as exc:
            raise RequestError(502, "upstream_unavailable", str(exc)) from exc
        finally:
            await upstream_response.aclose()
        return _relay_error(upstream_response, dialect)
    if exchange.stream and _is_sse(upstream_response):
        return StreamingResponse(
            _relay_stream(ctx, exchange, upstream_response),
            media_type="text/event-stream",
            headers={RELEASE_HEADER: exchange.receipt_release, "cache-control": "no-store"},
        )
    return await _buffered(ctx, exchange, upstream_response)


async def _buffered(ctx: AppContext, exchange: Exchange, upstream: UpstreamReply) -> Response:
    try:
        content = await upstream.aread()  # read already, unless a stream was asked for
    except UpstreamBrokeError as exc:
        raise RequestError(502, "upstream_unavailable", str(exc)) from exc
    finally:
        await upstream.aclose()
    exchange.upstream_done = time.perf_counter()
    text = content.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    usage = usage_of(parsed) if isinstance(parsed, dict) else NO_USAGE
    if isinstance(parsed, dict):
        meta = parsed.get("meta_info")
        await exchange.observe_version(
            parsed.get("weight_version")
            or (meta.get("weight_version") if isinstance(meta, dict) else None),
            ctx,
        )
    event = exchange.record(
        ctx, status=upstream.status_code, complete=True, response=text, usage=usage
    )
    await ctx.store.append(event)
    exchange.copy_to_shadow(ctx)
    if exchange.span is not None:
        exchange.span.recorded(event, parsed if isinstance(parsed, dict) else None)
    headers = {RECEIPT_HEADER: exchange.receipt, RELEASE_HEADER: exchange.receipt_release}
    return Response(
        content,
        status_code=upstream.status_code,
        media_type=upstream.headers.get("content-type", "application/json"),
        headers=headers,
    )


async def _relay_stream(
    ctx: AppContext, exchange: Exchange, upstream: UpstreamReply
) -> AsyncIterator[bytes]:
    """Relay SSE events as they arrive; store the record before the receipt goes out."""
    splitter = SseSplitter()
    assembly = StreamAssembly()
    finished = False
    try:
        async for chunk in upstream.aiter_bytes():
            # the events that arrived together go out together: one send, not one per event
            relayed: list[bytes] = []
            for block in splitter.feed(chunk):
                event = parse_event(block)
                assembly.observe(event)
                if not is_terminal(exchange.route, event):
                    relayed.append(block)
                    continue
                if relayed:  # before waiting for the log: the client has them at once
                    yield b"".join(relayed)
                    relayed = []
                exchange.upstream_done = time.perf_counter()
                record = exchange.record(
                    ctx,
                    status=200,
                    complete=True,
                    response=json.dumps(assembly.record_body()),
                    usage=assembly.usage,
                )
                finished = True
                try:
                    await ctx.store.append(record)
                except LogUnavailableError as exc:
                    if exchange.span is not None:
                        exchange.span.failed(exc)
                    yield _stream_error(exchange, str(exc))
                    return
                exchange.copy_to_shadow(ctx)
                if exchange.span is not None:
                    exchange.span.recorded(record, assembly.first_chunk or assembly.final_response)
                yield receipt_frames(exchange.route, event, assembly, exchange.receipt)
            if relayed:
                yield b"".join(relayed)
        if not finished:
            _record_incomplete(
                ctx, exchange, assembly, "upstream stream ended without its final event"
            )
            finished = True
    except UpstreamBrokeError as exc:
        if not finished:
            _record_incomplete(ctx, exchange, assembly, f"upstream stream broke: {exc!r}")
            finished = True
        yield _stream_error(exchange, "upstream stream broke off")
    finally:
        if not finished:  # the client went away mid-stream
            _record_incomplete(ctx, exchange, assembly, "client disconnected")
        await asyncio.shield(upstream.aclose())


def _record_incomplete(
    ctx: AppContext, exchange: Exchange, assembly: StreamAssembly, why: str
) -> None:
    """Store a diagnostic record (no receipt is ever sent for it), even if cancelled."""
    record = exchange.record(
        ctx,
        status=200,
        complete=False,
        response=json.dumps(assembly.record_body()),
        usage=assembly.usage,
        error=why,
    )
    ctx.background.spawn(ctx.store.append(record), name=f"incomplete:{exchange.receipt}")
    if exchange.span is not None:
        exchange.span.recorded(record, assembly.first_chunk or assembly.final_response)


def _stream_error(exchange: Exchange, message: str) -> bytes:
    dialect = Dialect.ANTHROPIC if exchange.dialect == "anthropic" else Dialect.OPENAI
    body = error_body(dialect, 503 if "log" in message else 502, "stream_failed", message)
    name = "error" if dialect is Dialect.ANTHROPIC else None
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(body)}\n\n".encode()


def _is_sse(response: UpstreamReply) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.startswith("text/event-stream")


def _relay_error(upstream: UpstreamReply, dialect: Dialect) -> Response:
    """Relay the provider's own error body (4xx keep their code; 5xx become 502)."""
    status = relayed_status(upstream.status_code)
    try:
        body: Any = upstream.json()
    except ValueError:
        body = None
    if status == 502 or not isinstance(body, dict):
        message = f"upstream answered {upstream.status_code}"
        raise RequestError(status, "upstream_error", message)
    return Response(json.dumps(body), status_code=status, media_type="application/json")
