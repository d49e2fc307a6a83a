"""The scripted upstream's tool calls, in process: each dialect, buffered and streamed, read
back by the providers' own SDKs, and the captured agent CLI requests replayed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from reef.testing.scripted_tools import ToolCall, split_calls, tool_turn
from reef.testing.scripted_upstream import make_app

AGENTS = Path(__file__).resolve().parents[3] / "fixtures" / "agents"
ARGS = {"file_path": "/tmp/w/hello.txt", "content": "line one\nline two"}
PROMPT = f"Call tool Write with {json.dumps(ARGS)} Return exactly: wrote it"
CHAT_TOOLS = [{"type": "function", "function": {"name": "Write", "parameters": {}}}]
RESPONSE_TOOLS = [{"type": "function", "name": "Write", "parameters": {}}]
ANTHROPIC_TOOLS = [{"name": "Write", "input_schema": {"type": "object"}}]


def _app() -> Any:
    """The stand-in (a raw ASGI app, typed with plain dicts)."""
    return make_app()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://stub") as client:
        yield client


@pytest.fixture
async def sdk_http() -> AsyncIterator[httpx2.AsyncClient]:
    """The same app for the providers' SDKs (they speak through httpx2)."""
    transport = httpx2.ASGITransport(app=_app())
    async with httpx2.AsyncClient(transport=transport, base_url="http://stub") as client:
        yield client


def test_directives_are_split_from_the_text_in_order() -> None:
    text, calls = split_calls('a Call tool A with {"x": 1} b Call tool B with {"y": [2]} c')
    assert " ".join(text.split()) == "a b c"
    assert calls == (ToolCall("A", '{"x":1}'), ToolCall("B", '{"y":[2]}'))


def test_a_directive_without_a_json_object_stays_text() -> None:
    for prompt in ("Call tool A with {broken", "Call tool A with [1, 2]"):
        assert split_calls(prompt) == (prompt, ())


def test_the_turn_is_the_last_prompt_and_the_results_after_it() -> None:
    anthropic_turn = [
        {"role": "user", "content": "old"},
        {"role": "user", "content": [{"type": "text", "text": PROMPT}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Write"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
    ]
    responses_turn = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]},
        {"type": "function_call", "call_id": "c", "name": "Write", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
    ]
    chat_turn = [{"role": "user", "content": PROMPT}, {"role": "tool", "content": "ok"}]
    for turn in (anthropic_turn, responses_turn, chat_turn):
        assert tool_turn(turn) == (PROMPT, 1)
    assert tool_turn(anthropic_turn[:2]) == (PROMPT, 0)


async def test_anthropic_buffered_then_answered(http: httpx.AsyncClient) -> None:
    body: dict[str, Any] = {"model": "m", "max_tokens": 64, "tools": ANTHROPIC_TOOLS}
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    first = (await http.post("/v1/messages", json={**body, "messages": messages})).json()
    assert first["stop_reason"] == "tool_use"
    (block,) = first["content"]
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "Write", ARGS)
    result = {"type": "tool_result", "tool_use_id": block["id"], "content": "done"}
    messages += [{"role": "assistant", "content": first["content"]}]
    messages += [{"role": "user", "content": [result]}]
    second = (await http.post("/v1/messages", json={**body, "messages": messages})).json()
    assert (second["stop_reason"], second["content"][0]["text"]) == ("end_turn", "wrote it")


async def test_anthropic_stream_read_by_the_sdk(sdk_http: httpx2.AsyncClient) -> None:
    client = anthropic.AsyncAnthropic(base_url="http://stub", api_key="k", http_client=sdk_http)
    async with client.messages.stream(
        model="m",
        max_tokens=64,
        tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": PROMPT}],
    ) as stream:
        message = await stream.get_final_message()
    assert message.stop_reason == "tool_use"
    (block,) = message.content
    assert block.type == "tool_use" and (block.name, block.input) == ("Write", ARGS)


async def test_responses_buffered_and_streamed(sdk_http: httpx2.AsyncClient) -> None:
    client = openai.AsyncOpenAI(base_url="http://stub/v1", api_key="k", http_client=sdk_http)
    buffered = await client.responses.create(
        model="m",
        input=PROMPT,
        tools=RESPONSE_TOOLS,  # type: ignore[arg-type]
    )
    async with client.responses.stream(
        model="m",
        input=PROMPT,
        tools=RESPONSE_TOOLS,  # type: ignore[arg-type]
    ) as stream:
        kinds = [event.type async for event in stream]
        streamed = await stream.get_final_response()
    for response in (buffered, streamed):
        (item,) = response.output
        assert item.type == "function_call"
        assert (item.name, json.loads(item.arguments)) == ("Write", ARGS)
    assert kinds[2:4] == ["response.output_item.added", "response.function_call_arguments.delta"]
    assert kinds[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    call = streamed.output[0]
    assert call.type == "function_call"
    follow = [
        {"role": "user", "content": PROMPT},
        {"type": "function_call", "call_id": call.call_id, "name": "Write", "arguments": "{}"},
        {"type": "function_call_output", "call_id": call.call_id, "output": "done"},
    ]
    answer = await client.responses.create(
        model="m",
        input=follow,  # type: ignore[arg-type]
        tools=RESPONSE_TOOLS,  # type: ignore[arg-type]
    )
    assert answer.output_text == "wrote it"


async def test_chat_buffered_and_streamed(sdk_http: httpx2.AsyncClient) -> None:
    client = openai.AsyncOpenAI(base_url="http://stub/v1", api_key="k", http_client=sdk_http)
    messages: list[Any] = [{"role": "user", "content": PROMPT}]
    buffered = await client.chat.completions.create(
        model="m",
        messages=messages,
        tools=CHAT_TOOLS,  # type: ignore[arg-type]
    )
    async with client.chat.completions.stream(
        model="m",
        messages=messages,
        tools=CHAT_TOOLS,  # type: ignore[arg-type]
    ) as stream:
        streamed = await stream.get_final_completion()
    for completion in (buffered, streamed):
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls or []
        assert call.type == "function"
        assert (call.function.name, json.loads(call.function.arguments)) == ("Write", ARGS)
    said = buffered.choices[0].message.model_dump(exclude_none=True)
    messages += [said, {"role": "tool", "tool_call_id": "call_stub_1", "content": "done"}]
    answer = await client.chat.completions.create(
        model="m",
        messages=messages,
        tools=CHAT_TOOLS,  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content == "wrote it"


async def test_a_request_offering_no_tools_is_answered_with_text(
    http: httpx.AsyncClient,
) -> None:
    plain = {"model": "m", "messages": [{"role": "user", "content": PROMPT}]}
    reply = (await http.post("/v1/chat/completions", json=plain)).json()
    assert reply["choices"][0]["message"]["content"] == "wrote it"
    hello = {**plain, "messages": [{"role": "user", "content": "hello"}], "tools": CHAT_TOOLS}
    reply = (await http.post("/v1/chat/completions", json=hello)).json()
    assert reply["choices"][0]["message"]["content"] == "ok: hello"


@pytest.mark.parametrize(
    ("folder", "path", "tool"),
    [
        ("claude_code/quiet", "/v1/messages", "Write"),
        ("claude_code/interactive", "/v1/messages", "Write"),
        ("codex/exec", "/v1/responses", "exec_command"),
    ],
)
async def test_captured_agent_requests_get_the_scripted_call_then_the_answer(
    http: httpx.AsyncClient, folder: str, path: str, tool: str
) -> None:
    headers = {"content-type": "application/json"}
    first = (AGENTS / folder / "first_request.json").read_bytes()
    second = (AGENTS / folder / "tool_result_request.json").read_bytes()
    called = await http.post(
        path, content=first.replace(b'"stream":true', b'"stream":false'), headers=headers
    )
    answered = await http.post(
        path, content=second.replace(b'"stream":true', b'"stream":false'), headers=headers
    )
    said = json.dumps(called.json())
    assert f'"name": "{tool}"' in said and "hello.txt" in said
    assert "wrote hello.txt" in answered.text and f'"name":"{tool}"' not in answered.text
