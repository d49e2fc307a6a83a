"""Reef in front of its own engine, in every dialect: the official ``anthropic`` and
``openai`` SDKs talk to Reef's app in process, whose upstream is the engine app on a
loopback port (as ``reef serve`` without ``upstream_url`` points Reef at ``reef engine``).

The engine serves the tiny model taught one tool call (:mod:`tests.support.taught_tools`).
Anthropic messages and Responses requests reach the engine natively, buffered and
streamed; the answer arrives in each SDK's own shape, the receipt names the scenario's
head, and the recorded exchange holds the call and the token record. A request pinned
to a held release reaches the engine with the routed-release header, and the engine
answers it from that release's slot.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from reef.api.context import AppContext
from reef.api.upstream import Upstream
from reef.core import routing
from reef.core.dialogue.model import ToolCall
from reef.core.dialogue.records import answer_of
from reef.core.events import InferenceRecorded
from reef.core.ids import release_id
from reef.core.topics import INFERENCE
from reef.engine.config import EngineConfig
from reef.engine.model import EngineModel
from reef.engine.server import create_app as engine_app
from reef.settings import RecordingSettings, Settings, UpstreamSettings
from reef.wiring import create_app
from tests.support.in_process import serving
from tests.support.rollouts import committed
from tests.support.taught_tools import (
    ANTHROPIC_TOOLS,
    CALL_TEXT,
    QUESTION,
    RESPONSES_TOOLS,
    taught_model,
)

SCENARIO = "own-engine"
CITY = {"city": "paris"}


@pytest.fixture(scope="module")
def taught() -> EngineModel:
    return taught_model()


@dataclass
class Gateway:
    """Reef's app over its engine: the SDKs' HTTP client, the app's context, and what
    reached the engine (path, routed-release header)."""

    http: httpx2.AsyncClient
    ctx: AppContext
    reached: list[tuple[str, str | None]] = field(default_factory=list)

    def claude(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            base_url="http://reef",
            api_key="unused",
            http_client=self.http,
            max_retries=0,
            default_headers={"x-reef-scenario": SCENARIO},
        )

    def oai(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url="http://reef/v1",
            api_key="unused",
            http_client=self.http,
            max_retries=0,
            default_headers={"x-reef-scenario": SCENARIO},
        )

    async def records(self) -> list[InferenceRecorded]:
        ends = await self.ctx.store.log.end_offsets(INFERENCE)
        return [
            s.event
            async for s in self.ctx.store.read(INFERENCE, until=ends)
            if isinstance(s.event, InferenceRecorded)
        ]

    async def record(self, receipt: str) -> InferenceRecorded:
        (found,) = [r for r in await self.records() if r.event_id == receipt]
        return found

    @property
    def head(self) -> str:
        return self.ctx.projection.state.scenarios[SCENARIO].head


def _watched(app: Any, reached: list[tuple[str, str | None]]) -> Callable[..., Any]:
    """The engine app, noting each request's path and routed-release header."""
    wanted = routing.SERVE_RELEASE_HEADER.encode()

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            named = dict(scope["headers"]).get(wanted)
            reached.append((scope["path"], named.decode() if named else None))
        await app(scope, receive, send)

    return asgi


@pytest.fixture
async def gateway(taught: EngineModel, tmp_path: Path) -> AsyncIterator[Gateway]:
    engine = engine_app(EngineConfig(model="tiny"), taught)
    reached: list[tuple[str, str | None]] = []
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(engine.router.lifespan_context(engine))
        url = await stack.enter_async_context(serving(_watched(engine, reached)))
        settings = Settings.of(
            state_dir=tmp_path / "state",
            upstream_url=f"{url}/v1",
            upstream_dialect="openai",
            insecure=True,
            record_top_logprobs=2,
            serve_role="api",
            log="embedded",
        )
        app = create_app(settings)
        await stack.enter_async_context(app.router.lifespan_context(app))
        http = await stack.enter_async_context(
            httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://reef")
        )
        yield Gateway(http, app.state.ctx, reached)


def _calls(record: InferenceRecorded) -> list[tuple[str, Any]]:
    """The tool calls the recorded answer holds (name, parsed arguments)."""
    assert record.response_json is not None
    answer = answer_of(json.loads(record.response_json), record.route)
    return [
        (part.name, part.arguments)
        for message in answer
        for part in message.parts
        if isinstance(part, ToolCall)
    ]


def _token_record(record: InferenceRecorded) -> dict[str, Any]:
    assert record.response_json is not None
    meta: dict[str, Any] = json.loads(record.response_json)["meta_info"]
    return meta


def test_the_token_record_is_asked_for_by_header_where_the_body_has_no_logprobs() -> None:
    engine = Upstream(UpstreamSettings(url="http://engine/v1"), RecordingSettings(top_logprobs=3))
    asked = {
        suffix: engine.build("POST", suffix, b"{}", {}).headers.get(routing.LOGPROBS_HEADER)
        for suffix in ("/messages", "/responses", "/chat/completions", "/messages/count_tokens")
    }
    assert asked == {
        "/messages": "3",
        "/responses": "3",
        "/chat/completions": None,  # chat asks in its body: logprobs, top_logprobs
        "/messages/count_tokens": None,
    }
    provider = Upstream(UpstreamSettings(url="http://provider/v1"), RecordingSettings())
    assert routing.LOGPROBS_HEADER not in provider.build("POST", "/messages", b"{}", {}).headers


# -- Anthropic messages -----------------------------------------------------------------


async def test_messages_reach_the_engine_natively_and_are_recorded(gateway: Gateway) -> None:
    claude = gateway.claude()
    raw = await claude.messages.with_raw_response.create(
        model="tiny",
        max_tokens=40,
        extra_body={"temperature": 0},
        tools=ANTHROPIC_TOOLS,
        messages=[{"role": "user", "content": QUESTION}],
    )
    message = await raw.parse()
    assert message.stop_reason == "tool_use"
    (block,) = message.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == CITY
    assert raw.headers["x-reef-release-id"] == gateway.head
    record = await gateway.record(raw.headers["x-reef-agent-record-id"])
    assert (record.route, record.dialect, record.release_id) == (
        "/v1/messages",
        "anthropic",
        gateway.head,
    )
    assert record.weight_version == "taught" and record.complete
    assert _calls(record) == [("get_weather", CITY)]
    meta = _token_record(record)  # asked of the engine for the record, as on chat
    assert len(meta["output_ids"]) == record.output_tokens == len(CALL_TEXT) + 1
    assert [lp[1] for lp in meta["output_token_logprobs"]] == meta["output_ids"]
    assert [len(top) for top in meta["output_top_logprobs"]] == [2] * len(meta["output_ids"])
    assert record.request_json is not None  # the client's request, as sent
    assert "logprobs" not in json.loads(record.request_json)
    assert gateway.reached[-1] == ("/v1/messages", None)  # the head: no routed release

    async with claude.messages.stream(
        model="tiny",
        max_tokens=40,
        extra_body={"temperature": 0},
        tools=ANTHROPIC_TOOLS,
        messages=[{"role": "user", "content": QUESTION}],
    ) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "tool_use"
    (streamed,) = final.content
    assert streamed.type == "tool_use" and streamed.input == CITY
    (_, record) = await gateway.records()
    assert record.stream and record.complete and record.route == "/v1/messages"
    assert record.release_id == gateway.head and record.weight_version == "taught"
    assert _calls(record) == [("get_weather", CITY)]
    assert record.output_tokens == len(CALL_TEXT) + 1


async def test_count_tokens_reaches_the_engine(gateway: Gateway) -> None:
    counted = await gateway.claude().messages.count_tokens(
        model="tiny", tools=ANTHROPIC_TOOLS, messages=[{"role": "user", "content": QUESTION}]
    )
    assert counted.input_tokens > len(QUESTION)
    (record,) = await gateway.records()
    assert record.route == "/v1/messages/count_tokens" and record.status == 200


# -- OpenAI Responses -------------------------------------------------------------------


async def test_responses_reach_the_engine_natively_and_are_recorded(gateway: Gateway) -> None:
    oai = gateway.oai()
    raw = await oai.responses.with_raw_response.create(
        model="tiny", input=QUESTION, tools=RESPONSES_TOOLS, temperature=0, max_output_tokens=40
    )
    response = raw.parse()
    (item,) = response.output
    assert item.type == "function_call" and item.name == "get_weather"
    assert json.loads(item.arguments) == CITY
    assert raw.headers["x-reef-release-id"] == gateway.head
    record = await gateway.record(raw.headers["x-reef-agent-record-id"])
    assert (record.route, record.dialect, record.release_id) == (
        "/v1/responses",
        "openai",
        gateway.head,
    )
    assert _calls(record) == [("get_weather", CITY)]
    meta = _token_record(record)
    assert len(meta["output_ids"]) == record.output_tokens == len(CALL_TEXT) + 1

    stream = await oai.responses.create(
        model="tiny",
        input=QUESTION,
        tools=RESPONSES_TOOLS,
        temperature=0,
        max_output_tokens=40,
        stream=True,
    )
    events = [event async for event in stream]
    final = events[-1]
    assert final.type == "response.completed"
    (done,) = final.response.output
    assert done.type == "function_call" and json.loads(done.arguments) == CITY
    (_, record) = await gateway.records()
    assert record.stream and record.complete and record.route == "/v1/responses"
    assert _calls(record) == [("get_weather", CITY)]
    assert record.output_tokens == len(CALL_TEXT) + 1


# -- a pinned release ---------------------------------------------------------------------


async def test_a_pinned_held_release_is_served_from_its_slot_in_every_dialect(
    gateway: Gateway, taught: EngineModel
) -> None:
    await gateway.claude().messages.count_tokens(  # creates the scenario
        model="tiny", messages=[{"role": "user", "content": QUESTION}]
    )
    held = release_id(SCENARIO, gateway.head, "held-content", "training")
    position = await gateway.ctx.store.append(committed(SCENARIO, held, pending=True))
    await gateway.ctx.projection.wait_for(position)
    # the held release's weights in a slot of the engine: the untaught tiny model
    taught.load_adapter(held, "tiny", weight_version=held)
    try:
        pin = {"x-reef-release-id": held}
        message = await gateway.claude().messages.with_raw_response.create(
            model="tiny",
            max_tokens=8,
            extra_body={"temperature": 0},
            extra_headers=pin,
            tools=ANTHROPIC_TOOLS,
            messages=[{"role": "user", "content": QUESTION}],
        )
        response = await gateway.oai().responses.with_raw_response.create(
            model="tiny",
            input=QUESTION,
            tools=RESPONSES_TOOLS,
            temperature=0,
            max_output_tokens=8,
            extra_headers=pin,
            stream=True,
        )
        events = [event async for event in response.parse()]
        chat = await gateway.oai().chat.completions.with_raw_response.create(
            model="tiny",
            messages=[{"role": "user", "content": QUESTION}],
            temperature=0,
            max_tokens=8,
            extra_headers=pin,
        )
    finally:
        taught.unload_adapter(held)
    routes = ["/v1/messages", "/v1/responses", "/v1/chat/completions"]
    assert gateway.reached[-3:] == [(route, held) for route in routes]
    # the slot's untaught weights answered: no call
    assert (await message.parse()).stop_reason != "tool_use"
    final = events[-1]
    assert final.type in ("response.completed", "response.incomplete")
    assert [item.type for item in final.response.output] == ["message"]
    for answer in (message, response, chat):
        assert answer.headers["x-reef-release-id"] == held
    for record in (await gateway.records())[-3:]:
        assert record.release_id == record.served_release_id == record.weight_version == held
        assert record.complete
