"""Tool calls through the official SDKs: OpenAI chat completions and Responses, Anthropic
messages, buffered and streamed, against the engine app in process.

The tiny model is taught a tool call first (:mod:`tests.support.taught_tools`: a few
seconds of training, seeded, once per test process).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI

from reef.engine.config import EngineConfig
from reef.engine.model import EngineModel
from reef.engine.server import create_app
from tests.support.taught_tools import (
    ANTHROPIC_TOOLS,
    CALL_TEXT,
    CHAT_TOOLS,
    DESCRIPTION,
    NO_TOOLS,
    QUESTION,
    RESPONSES_TOOLS,
    SCHEMA,
    SUNNY,
    TWO_CITIES,
    taught_model,
)


@pytest.fixture(scope="module")
def taught() -> EngineModel:
    return taught_model()


@pytest.fixture
async def app(taught: EngineModel) -> AsyncIterator[FastAPI]:
    served = create_app(EngineConfig(model="tiny"), taught)
    async with served.router.lifespan_context(served):
        yield served


@pytest.fixture
async def http(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        yield client


@pytest.fixture
async def sdk_http(app: FastAPI) -> AsyncIterator[httpx2.AsyncClient]:
    """The SDKs' own HTTP client (they speak httpx2, httpx's successor)."""
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://engine") as client:
        yield client


@pytest.fixture
def oai(sdk_http: httpx2.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://engine/v1", api_key="unused", http_client=sdk_http, max_retries=0
    )


@pytest.fixture
def claude(sdk_http: httpx2.AsyncClient) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url="http://engine", api_key="unused", http_client=sdk_http, max_retries=0
    )


def _sse_types(text: str) -> list[str]:
    return [
        line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")
    ]


# -- chat completions ---------------------------------------------------------------

CHAT_QUESTION: Any = [{"role": "user", "content": QUESTION}]


async def test_chat_answers_with_a_tool_call_and_records_its_tokens(
    oai: openai.AsyncOpenAI,
) -> None:
    raw = await oai.chat.completions.with_raw_response.create(
        model="tiny",
        messages=CHAT_QUESTION,
        tools=CHAT_TOOLS,
        temperature=0,
        max_tokens=40,
        logprobs=True,
    )
    completion = raw.parse()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "paris"}
    meta = raw.http_response.json()["meta_info"]
    assert completion.usage is not None
    assert len(meta["output_ids"]) == completion.usage.completion_tokens == len(CALL_TEXT) + 1
    assert [lp[1] for lp in meta["output_token_logprobs"]] == meta["output_ids"]
    assert len((choice.logprobs.content or []) if choice.logprobs else []) == len(
        meta["output_ids"]
    )
    assert raw.headers["x-weight-version"] == "taught"


async def test_chat_streams_the_call_as_tool_call_deltas(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.chat.completions.create(
        model="tiny",
        messages=CHAT_QUESTION,
        tools=CHAT_TOOLS,
        temperature=0,
        max_tokens=40,
        stream=True,
        logprobs=True,
    )
    names, arguments, finishes, logprob_tokens, content = [], "", [], 0, ""
    async for chunk in stream:
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for delta in choice.delta.tool_calls or []:
            assert delta.index == 0
            if delta.function and delta.function.name:
                names.append(delta.function.name)
            arguments += (delta.function.arguments or "") if delta.function else ""
        if choice.logprobs and choice.logprobs.content:
            logprob_tokens += len(choice.logprobs.content)
        if choice.finish_reason:
            finishes.append(choice.finish_reason)
    assert names == ["get_weather"] and json.loads(arguments) == {"city": "paris"}
    assert content == "" and finishes == ["tool_calls"]
    assert logprob_tokens == len(CALL_TEXT) + 1  # every token's logprob sent once


async def test_chat_reads_the_tool_result_and_answers_in_text(oai: openai.AsyncOpenAI) -> None:
    messages: Any = [
        *CHAT_QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    buffered = await oai.chat.completions.create(
        model="tiny", messages=messages, tools=CHAT_TOOLS, temperature=0, max_tokens=40
    )
    assert buffered.choices[0].message.content == SUNNY
    assert buffered.choices[0].message.tool_calls is None
    assert buffered.choices[0].finish_reason == "stop"
    stream = await oai.chat.completions.create(
        model="tiny",
        messages=messages,
        tools=CHAT_TOOLS,
        temperature=0,
        max_tokens=40,
        stream=True,
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == SUNNY
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_chat_tool_choice_none_renders_no_tools_and_parses_nothing(
    oai: openai.AsyncOpenAI,
) -> None:
    completion = await oai.chat.completions.create(
        model="tiny",
        messages=CHAT_QUESTION,
        tools=CHAT_TOOLS,
        tool_choice="none",
        temperature=0,
        max_tokens=40,
    )
    assert completion.choices[0].message.content == NO_TOOLS
    assert completion.choices[0].finish_reason == "stop"


async def test_chat_named_tool_choice_accepts_its_call(oai: openai.AsyncOpenAI) -> None:
    completion = await oai.chat.completions.create(
        model="tiny",
        messages=CHAT_QUESTION,
        tools=CHAT_TOOLS,
        temperature=0,
        max_tokens=40,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    assert completion.choices[0].finish_reason == "tool_calls"


async def test_chat_refuses_a_tool_choice_naming_no_offered_tool(
    oai: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.chat.completions.create(
            model="tiny",
            messages=CHAT_QUESTION,
            tools=CHAT_TOOLS,
            max_tokens=4,
            tool_choice={"type": "function", "function": {"name": "delete_everything"}},
        )
    assert "delete_everything" in caught.value.message


async def test_a_call_to_a_tool_not_offered_comes_back_as_text(oai: openai.AsyncOpenAI) -> None:
    other: Any = [
        {
            "type": "function",
            "function": {"name": "get_time", "description": DESCRIPTION, "parameters": SCHEMA},
        }
    ]
    completion = await oai.chat.completions.create(
        model="tiny", messages=CHAT_QUESTION, tools=other, temperature=0, max_tokens=40
    )
    choice = completion.choices[0]
    assert choice.message.tool_calls is None
    assert choice.finish_reason in ("stop", "length")
    assert isinstance(choice.message.content, str)


async def test_chat_streams_parallel_calls_with_their_indexes(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": TWO_CITIES}],
        tools=CHAT_TOOLS,
        temperature=0,
        max_tokens=80,
        stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    async for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += delta.id or ""
            if delta.function:
                entry["name"] += delta.function.name or ""
                entry["arguments"] += delta.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert sorted(calls) == [0, 1]
    assert [json.loads(calls[i]["arguments"]) for i in (0, 1)] == [
        {"city": "paris"},
        {"city": "rome"},
    ]
    assert calls[0]["id"] != calls[1]["id"]


async def test_chat_without_parallel_calls_keeps_the_first(oai: openai.AsyncOpenAI) -> None:
    completion = await oai.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": TWO_CITIES}],
        tools=CHAT_TOOLS,
        temperature=0,
        max_tokens=80,
        parallel_tool_calls=False,
    )
    (call,) = completion.choices[0].message.tool_calls or []
    assert call.type == "function" and json.loads(call.function.arguments) == {"city": "paris"}


# -- Responses ----------------------------------------------------------------------


async def test_responses_answers_with_a_function_call_item(oai: openai.AsyncOpenAI) -> None:
    response = await oai.responses.create(
        model="tiny", input=QUESTION, tools=RESPONSES_TOOLS, temperature=0, max_output_tokens=40
    )
    assert response.status == "completed"
    (item,) = response.output
    assert item.type == "function_call"
    assert item.name == "get_weather" and json.loads(item.arguments) == {"city": "paris"}
    assert item.call_id.startswith("call_")
    assert response.usage is not None and response.usage.output_tokens == len(CALL_TEXT) + 1

    follow_up: Any = [
        {"role": "user", "content": QUESTION},
        {
            "type": "function_call",
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
        },
        {"type": "function_call_output", "call_id": item.call_id, "output": "sunny"},
    ]
    answer = await oai.responses.create(
        model="tiny", input=follow_up, tools=RESPONSES_TOOLS, temperature=0, max_output_tokens=40
    )
    assert answer.output_text == SUNNY
    assert [o.type for o in answer.output] == ["message"]


async def test_responses_streams_the_function_call_events(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.responses.create(
        model="tiny",
        input=QUESTION,
        tools=RESPONSES_TOOLS,
        temperature=0,
        max_output_tokens=40,
        stream=True,
    )
    events = [event async for event in stream]
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1]
    assert final.type == "response.completed"
    (item,) = final.response.output
    assert item.type == "function_call" and json.loads(item.arguments) == {"city": "paris"}


async def test_responses_answers_parallel_calls_as_items(oai: openai.AsyncOpenAI) -> None:
    response = await oai.responses.create(
        model="tiny", input=TWO_CITIES, tools=RESPONSES_TOOLS, temperature=0, max_output_tokens=80
    )
    items = [item for item in response.output if item.type == "function_call"]
    assert len(items) == len(response.output) == 2
    assert [json.loads(item.arguments)["city"] for item in items] == ["paris", "rome"]
    assert items[0].call_id != items[1].call_id


async def test_responses_streams_text_as_output_text_deltas(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.responses.create(
        model="tiny", input=QUESTION, temperature=0, max_output_tokens=40, stream=True
    )
    events = [event async for event in stream]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == NO_TOOLS
    final = events[-1]
    assert final.type == "response.completed" and final.response.output_text == NO_TOOLS


async def test_responses_errors_come_in_openais_shape(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/responses", json={"model": "tiny", "input": 3})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


# -- Anthropic messages ---------------------------------------------------------------

ANTHROPIC_QUESTION: Any = [{"role": "user", "content": QUESTION}]
#: the anthropic SDK's create() takes no temperature argument; the API reads it
GREEDY = {"temperature": 0}


async def test_messages_answers_with_a_tool_use_block(claude: anthropic.AsyncAnthropic) -> None:
    message = await claude.messages.create(
        model="tiny",
        max_tokens=40,
        extra_body=GREEDY,
        tools=ANTHROPIC_TOOLS,
        messages=ANTHROPIC_QUESTION,
    )
    assert message.stop_reason == "tool_use"
    (block,) = message.content
    assert block.type == "tool_use"
    assert block.name == "get_weather" and block.input == {"city": "paris"}
    assert block.id.startswith("toolu_")

    follow_up: Any = [
        *ANTHROPIC_QUESTION,
        {"role": "assistant", "content": [block.model_dump()]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "sunny"}],
        },
    ]
    answer = await claude.messages.create(
        model="tiny", max_tokens=40, extra_body=GREEDY, tools=ANTHROPIC_TOOLS, messages=follow_up
    )
    assert answer.stop_reason == "end_turn"
    assert [b.type for b in answer.content] == ["text"]
    assert answer.content[0].type == "text" and answer.content[0].text == SUNNY


async def test_messages_streams_anthropics_event_sequence(
    claude: anthropic.AsyncAnthropic, http: httpx.AsyncClient
) -> None:
    async with claude.messages.stream(
        model="tiny",
        max_tokens=40,
        extra_body=GREEDY,
        tools=ANTHROPIC_TOOLS,
        messages=ANTHROPIC_QUESTION,
    ) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "tool_use"
    (block,) = final.content
    assert block.type == "tool_use" and block.input == {"city": "paris"}

    body = {
        "model": "tiny",
        "max_tokens": 40,
        "temperature": 0,
        "stream": True,
        "tools": ANTHROPIC_TOOLS,
        "messages": ANTHROPIC_QUESTION,
    }
    raw = await http.post("/v1/messages", json=body)
    assert _sse_types(raw.text) == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


async def test_messages_stream_parallel_calls_as_tool_use_blocks(
    claude: anthropic.AsyncAnthropic,
) -> None:
    async with claude.messages.stream(
        model="tiny",
        max_tokens=80,
        extra_body=GREEDY,
        tools=ANTHROPIC_TOOLS,
        messages=[{"role": "user", "content": TWO_CITIES}],
    ) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "tool_use"
    inputs = [block.input for block in final.content if block.type == "tool_use"]
    assert inputs == [{"city": "paris"}, {"city": "rome"}] and len(final.content) == 2


async def test_messages_streams_text_deltas(claude: anthropic.AsyncAnthropic) -> None:
    async with claude.messages.stream(
        model="tiny", max_tokens=40, extra_body=GREEDY, messages=ANTHROPIC_QUESTION
    ) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert text == NO_TOOLS
    assert final.stop_reason == "end_turn" and final.content[0].type == "text"


async def test_count_tokens_counts_the_prompt_a_request_would_send(
    claude: anthropic.AsyncAnthropic,
) -> None:
    counted = await claude.messages.count_tokens(
        model="tiny", tools=ANTHROPIC_TOOLS, messages=ANTHROPIC_QUESTION
    )
    message = await claude.messages.create(
        model="tiny", max_tokens=1, tools=ANTHROPIC_TOOLS, messages=ANTHROPIC_QUESTION
    )
    assert counted.input_tokens == message.usage.input_tokens > len(QUESTION)


async def test_messages_errors_come_in_anthropics_shape(
    claude: anthropic.AsyncAnthropic,
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        await claude.messages.create(
            model="tiny",
            max_tokens=4,
            tools=ANTHROPIC_TOOLS,
            messages=ANTHROPIC_QUESTION,
            tool_choice={"type": "tool", "name": "nope"},
        )
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "tool_choice names 'nope', which is not in tools",
        },
    }


# -- token-exact records on every route -------------------------------------------------


@pytest.mark.parametrize(
    ("route", "extra"),
    [
        ("/v1/messages", {"max_tokens": 40, "tools": ANTHROPIC_TOOLS}),
        ("/v1/responses", {"max_output_tokens": 40, "tools": RESPONSES_TOOLS}),
    ],
)
async def test_a_tool_call_answer_carries_its_token_ids_and_logprobs(
    http: httpx.AsyncClient, route: str, extra: dict[str, Any]
) -> None:
    question = {"messages": ANTHROPIC_QUESTION} if route == "/v1/messages" else {"input": QUESTION}
    body = {"model": "tiny", "temperature": 0, "logprobs": True, **question, **extra}
    answer = (await http.post(route, json=body)).json()
    meta = answer["meta_info"]
    assert len(meta["output_ids"]) == answer["usage"]["output_tokens"] == len(CALL_TEXT) + 1
    assert [lp[1] for lp in meta["output_token_logprobs"]] == meta["output_ids"]
    assert all(lp[0] <= 0.0 for lp in meta["output_token_logprobs"])
    assert meta["weight_version"] == answer["weight_version"] == "taught"
