"""Streaming through Reef with both SDKs: deltas relayed, receipt in the final stream event.

OpenAI chat: one extra ``"choices": []`` chunk carrying ``"reef": {"agent_record_id"}``
just before ``data: [DONE]``; Responses API: the ``response.completed`` event carries it;
Anthropic: the ``message_stop`` event does. A stream that breaks off gets no receipt and
is stored as an incomplete record.

The app ``reef serve`` builds, in process, served on a loopback socket (uvicorn on the
app's loop: tests/support/embedded_app.py), so the streams cross real HTTP.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from reef.core.events import InferenceRecorded
from reef.core.topics import INFERENCE
from tests.support.api import RECEIPT, chat_body, messages_body, unique_scenario
from tests.support.embedded_app import AppFactory, EmbeddedApp

MODEL = "claude-test"


@pytest.fixture(scope="module")
def openai_app(app_factory: AppFactory) -> EmbeddedApp:
    return app_factory(dialect="openai")


@pytest.fixture(scope="module")
def anthropic_app(app_factory: AppFactory) -> EmbeddedApp:
    return app_factory(dialect="anthropic")


def over_socket(app: EmbeddedApp, scenario: str) -> httpx.Client:
    """httpx to the app's loopback socket, with its token and the scenario header."""
    return httpx.Client(base_url=app.base_url, headers=app.headers(scenario), timeout=30.0)


@pytest.fixture
def scenario() -> str:
    return unique_scenario("stream")


@pytest.fixture
def oai(openai_app: EmbeddedApp, scenario: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=openai_app.v1_url,
        api_key=openai_app.token,
        default_headers={"x-reef-scenario": scenario},
        max_retries=0,
        timeout=30.0,
    ) as sdk:
        yield sdk


@pytest.fixture
def ant(anthropic_app: EmbeddedApp, scenario: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=anthropic_app.base_url,
        api_key=anthropic_app.token,
        default_headers={"x-reef-scenario": scenario},
        max_retries=0,
        timeout=30.0,
    ) as sdk:
        yield sdk


def reef_extra(event: Any) -> dict[str, Any] | None:
    extra = event.model_extra or {}
    found = extra.get("reef")
    return found if isinstance(found, dict) else None


def sse_frames(lines: list[str]) -> list[tuple[str | None, str]]:
    """(event name, data) per SSE frame."""
    frames: list[tuple[str | None, str]] = []
    name: str | None = None
    data: list[str] = []
    for line in [*lines, ""]:
        if line == "":
            if data:
                frames.append((name, "\n".join(data)))
            name, data = None, []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    return frames


def only_event(app: EmbeddedApp, scenario: str, receipt: str) -> InferenceRecorded:
    events = app.inference(scenario)
    assert [e.event_id for e in events] == [receipt], events
    return events[0]


# ---------------------------------------------------------------------------
# OpenAI chat completions


def test_chat_stream_receipt_in_final_chunk(
    oai: openai.OpenAI, openai_app: EmbeddedApp, scenario: str
) -> None:
    with oai.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "Return exactly: zebra crossing"}],
        stream=True,
        stream_options={"include_usage": True},
    ) as stream:
        chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "zebra crossing"
    assert any(c.usage is not None and c.usage.completion_tokens == 2 for c in chunks)
    marked = [c for c in chunks if reef_extra(c) is not None]
    assert len(marked) == 1 and marked[0] is chunks[-1], [c.model_dump() for c in chunks[-3:]]
    last = chunks[-1]
    assert last.choices == []
    receipt = reef_extra(last)["agent_record_id"]  # type: ignore[index]
    assert RECEIPT.match(receipt), receipt
    event = only_event(openai_app, scenario, receipt)
    assert event.stream is True
    assert event.complete is True
    assert event.status == 200
    assert "zebra" in (event.response_json or ""), event.response_json


def test_chat_stream_wire_format(openai_app: EmbeddedApp, scenario: str) -> None:
    with (
        over_socket(openai_app, scenario) as client,
        client.stream(
            "POST", "/v1/chat/completions", json=chat_body("wire check", stream=True)
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        release = response.headers.get("x-reef-release-id")
        lines = list(response.iter_lines())
    frames = [data for _, data in sse_frames(lines)]
    assert frames[-1] == "[DONE]", frames[-3:]
    final = json.loads(frames[-2])
    assert final["object"] == "chat.completion.chunk"
    assert final["choices"] == []
    assert {"id", "created", "model"} <= set(final), final
    receipt = final["reef"]["agent_record_id"]
    assert RECEIPT.match(receipt)
    assert not any("agent_record_id" in data for data in frames[:-2])
    event = only_event(openai_app, scenario, receipt)
    assert release is not None, "a stream's response headers should name the serving release"
    assert event.release_id == release


def test_chat_stream_relays_upstream_frames(openai_app: EmbeddedApp, scenario: str) -> None:
    with (
        over_socket(openai_app, scenario) as client,
        client.stream(
            "POST", "/v1/chat/completions", json=chat_body("one two three", stream=True)
        ) as response,
    ):
        datas = [data for _, data in sse_frames(list(response.iter_lines()))]
    chunks = [json.loads(d) for d in datas[:-2]]
    assert [c["id"] for c in chunks] == [chunks[0]["id"]] * len(chunks)
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert "".join(d for d in deltas if d) == "ok: one two three"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_chat_stream_that_breaks_gets_no_receipt_and_is_stored_incomplete(
    oai: openai.OpenAI, openai_app: EmbeddedApp, scenario: str
) -> None:
    chunks: list[Any] = []
    # Reef may drop the connection or end the SSE body early; either way no receipt.
    with (
        contextlib.suppress(openai.APIError, httpx.HTTPError),
        oai.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "one two three four five six __break_stream__"}],
            stream=True,
        ) as stream,
    ):
        for chunk in stream:
            chunks.append(chunk)
    assert all(reef_extra(c) is None for c in chunks)
    assert any(c.choices and c.choices[0].delta.content for c in chunks), "no delta relayed"
    stored = openai_app.wait_for(INFERENCE, scenario)
    assert len(stored) == 1, stored
    (event,) = stored
    assert isinstance(event, InferenceRecorded)
    assert event.complete is False
    assert event.stream is True


def test_chat_stream_upstream_failure_is_502_before_streaming(
    oai: openai.OpenAI, openai_app: EmbeddedApp, scenario: str
) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        oai.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "__status_500__"}], stream=True
        )
    assert caught.value.status_code == 502
    assert openai_app.inference(scenario) == []


# ---------------------------------------------------------------------------
# OpenAI Responses API


def test_responses_stream_receipt_in_completed_event(
    oai: openai.OpenAI, openai_app: EmbeddedApp, scenario: str
) -> None:
    with oai.responses.create(model="gpt-4o", input="Return exactly: tidal pool", stream=True) as s:
        events = list(s)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "tidal pool"
    completed = [e for e in events if e.type == "response.completed"]
    assert len(completed) == 1 and completed[0] is events[-1]
    assert completed[0].response.output_text == "tidal pool"
    marked = [e for e in events if reef_extra(e) is not None]
    assert marked == completed, [e.type for e in marked]
    receipt = reef_extra(completed[0])["agent_record_id"]  # type: ignore[index]
    assert RECEIPT.match(receipt)
    event = only_event(openai_app, scenario, receipt)
    assert event.stream is True and event.complete is True


# ---------------------------------------------------------------------------
# Anthropic messages


def test_messages_stream_receipt_on_message_stop(
    ant: anthropic.Anthropic, anthropic_app: EmbeddedApp, scenario: str
) -> None:
    with ant.messages.create(
        model=MODEL,
        max_tokens=64,
        stream=True,
        messages=[{"role": "user", "content": "Return exactly: coral reef"}],
    ) as stream:
        events = list(stream)
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text == "coral reef"
    assert events[-1].type == "message_stop"
    marked = [e for e in events if reef_extra(e) is not None]
    assert marked == [events[-1]], [e.type for e in marked]
    receipt = reef_extra(events[-1])["agent_record_id"]  # type: ignore[index]
    assert RECEIPT.match(receipt)
    event = only_event(anthropic_app, scenario, receipt)
    assert event.stream is True and event.complete is True and event.status == 200


def test_messages_stream_helper_still_works(ant: anthropic.Anthropic) -> None:
    with ant.messages.stream(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Return exactly: a b c"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "a b c"
    assert final.content[0].text == "a b c"  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"


def test_messages_stream_wire_format(anthropic_app: EmbeddedApp, scenario: str) -> None:
    with (
        over_socket(anthropic_app, scenario) as client,
        client.stream("POST", "/v1/messages", json=messages_body("wire", stream=True)) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = sse_frames(list(response.iter_lines()))
    names = [name for name, _ in frames]
    assert names[0] == "message_start" and names[-1] == "message_stop", names
    stop = json.loads(frames[-1][1])
    assert stop["type"] == "message_stop"
    receipt = stop["reef"]["agent_record_id"]
    assert RECEIPT.match(receipt)
    assert not any("agent_record_id" in data for _, data in frames[:-1])
    only_event(anthropic_app, scenario, receipt)


def test_messages_stream_that_breaks_gets_no_receipt_and_is_stored_incomplete(
    ant: anthropic.Anthropic, anthropic_app: EmbeddedApp, scenario: str
) -> None:
    events: list[Any] = []
    with (
        contextlib.suppress(anthropic.APIError, httpx.HTTPError),
        ant.messages.create(
            model=MODEL,
            max_tokens=64,
            stream=True,
            messages=[{"role": "user", "content": "alpha beta gamma delta __break_stream__"}],
        ) as stream,
    ):
        for event in stream:
            events.append(event)
    assert all(reef_extra(e) is None for e in events)
    assert not any(e.type == "message_stop" for e in events)
    stored = anthropic_app.wait_for(INFERENCE, scenario)
    assert len(stored) == 1, stored
    (recorded,) = stored
    assert isinstance(recorded, InferenceRecorded)
    assert recorded.complete is False and recorded.stream is True


def test_messages_stream_upstream_rate_limit_is_relayed(
    ant: anthropic.Anthropic, anthropic_app: EmbeddedApp, scenario: str
) -> None:
    with pytest.raises(anthropic.RateLimitError):
        ant.messages.create(
            model=MODEL,
            max_tokens=64,
            stream=True,
            messages=[{"role": "user", "content": "__status_429__"}],
        )
    assert anthropic_app.inference(scenario) == []
