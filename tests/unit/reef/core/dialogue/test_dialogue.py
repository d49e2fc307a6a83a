"""The conversation model: each dialect round-trips exactly; the canonical form session
fingerprints hash is the one records already on the log were fingerprinted with."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reef.core.dialogue import canonical, records, streams
from reef.core.dialogue.model import Reasoning, Text, ToolCall, ToolResult, merged

TEXT = st.text(max_size=6)
IDS = st.text(alphabet="abcdef0123456789", min_size=1, max_size=6)
NAMES = st.sampled_from(["Write", "Read", "shell", "exec_command"])
ARGS = st.dictionaries(st.sampled_from(["path", "content", "command"]), TEXT, max_size=2)
CACHE = st.sampled_from([{}, {"cache_control": {"type": "ephemeral"}}])


def _text_block(kind: str = "text") -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda t, c: {"type": kind, "text": t, **c}, TEXT, CACHE if kind == "text" else st.just({})
    )


# -- chat completions ------------------------------------------------------------------

_chat_call = st.builds(
    lambda i, n, a: {
        "id": i,
        "type": "function",
        "function": {"name": n, "arguments": json.dumps(a)},
    },
    IDS,
    NAMES,
    ARGS,
)
_image_url = st.builds(
    lambda u: {"type": "image_url", "image_url": {"url": u}}, st.just("https://x/y.png")
)
_chat_user = st.builds(
    lambda role, c: {"role": role, "content": c},
    st.sampled_from(["system", "developer", "user"]),
    TEXT
    | st.lists(
        st.one_of(st.builds(lambda t: {"type": "text", "text": t}, TEXT), _image_url), max_size=3
    ),
)
_chat_assistant = st.builds(
    lambda c, calls: {
        "role": "assistant",
        "content": c,
        **({"tool_calls": calls} if calls else {}),
    },
    st.none() | TEXT,
    st.lists(_chat_call, max_size=2),
)
_chat_tool = st.builds(
    lambda i, c: {"role": "tool", "tool_call_id": i, "content": c},
    IDS,
    TEXT | st.lists(st.builds(lambda t: {"type": "text", "text": t}, TEXT), max_size=2),
)
_chat_tool_offered = st.builds(
    lambda n, d: {
        "type": "function",
        "function": {
            "name": n,
            "description": d,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    NAMES,
    TEXT,
)
CHAT = st.builds(
    lambda ms, tools: {
        "model": "m",
        "stream": False,
        "messages": ms,
        **({"tools": tools} if tools else {}),
    },
    st.lists(st.one_of(_chat_user, _chat_assistant, _chat_tool), max_size=6),
    st.lists(_chat_tool_offered, max_size=2),
)

# -- Anthropic messages ----------------------------------------------------------------

_tool_use = st.builds(
    lambda i, n, a: {"type": "tool_use", "id": i, "name": n, "input": a}, IDS, NAMES, ARGS
)
_tool_result = st.builds(
    lambda i, c, e: {"type": "tool_result", "tool_use_id": i, **c, **e},
    IDS,
    st.one_of(
        st.just({}),
        st.builds(lambda t: {"content": t}, TEXT),
        st.builds(lambda b: {"content": b}, st.lists(_text_block(), max_size=2)),
    ),
    st.sampled_from([{}, {"is_error": True}, {"is_error": False}]),
)
_thinking = st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "sig"}, TEXT)
_image = st.just(
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
)
_anthropic_user = st.builds(
    lambda c: {"role": "user", "content": c},
    TEXT | st.lists(st.one_of(_text_block(), _tool_result, _image), min_size=1, max_size=3),
)
_anthropic_assistant = st.builds(
    lambda c: {"role": "assistant", "content": c},
    TEXT | st.lists(st.one_of(_text_block(), _tool_use, _thinking), min_size=1, max_size=3),
)
_anthropic_tool = st.builds(
    lambda n, d, c: {"name": n, "description": d, "input_schema": {"type": "object"}, **c},
    NAMES,
    TEXT,
    CACHE,
)
ANTHROPIC = st.builds(
    lambda system, ms, tools: {
        "model": "m",
        "max_tokens": 64,
        **system,
        "messages": ms,
        **({"tools": tools} if tools else {}),
    },
    st.one_of(
        st.just({}),
        st.builds(lambda s: {"system": s}, TEXT),
        st.builds(lambda s: {"system": s}, st.lists(_text_block(), min_size=1, max_size=2)),
    ),
    st.lists(st.one_of(_anthropic_user, _anthropic_assistant), max_size=6),
    st.lists(_anthropic_tool, max_size=2),
)

# -- OpenAI Responses ------------------------------------------------------------------

_message_item = st.builds(
    lambda typed, role, c: {**typed, "role": role, "content": c},
    st.sampled_from([{}, {"type": "message"}]),
    st.sampled_from(["user", "developer", "system"]),
    TEXT
    | st.lists(
        st.one_of(
            _text_block("input_text"),
            st.just({"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"}),
        ),
        max_size=2,
    ),
)
_assistant_item = st.builds(
    lambda t: {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": t, "annotations": []}],
    },
    TEXT,
)
_call_item = st.builds(
    lambda i, n, a: {"type": "function_call", "call_id": i, "name": n, "arguments": json.dumps(a)},
    IDS,
    NAMES,
    ARGS,
)
_output_item = st.builds(
    lambda i, o: {"type": "function_call_output", "call_id": i, "output": o}, IDS, TEXT
)
_reasoning_item = st.builds(
    lambda t: {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": t}],
        "encrypted_content": "gAAA",
    },
    TEXT,
)
_custom_items = st.builds(
    lambda i, t: [
        {"type": "custom_tool_call", "call_id": i, "name": "apply_patch", "input": t},
        {"type": "custom_tool_call_output", "call_id": i, "output": "ok"},
    ],
    IDS,
    TEXT,
)
_responses_tool = st.builds(
    lambda n: {
        "type": "function",
        "name": n,
        "description": "d",
        "strict": False,
        "parameters": {"type": "object"},
    },
    NAMES,
)
RESPONSES = st.builds(
    lambda instructions, items, tools: {
        "model": "m",
        **instructions,
        "input": items,
        **({"tools": tools} if tools else {}),
    },
    st.one_of(st.just({}), st.builds(lambda s: {"instructions": s}, TEXT)),
    TEXT
    | st.lists(
        st.one_of(
            _message_item, _assistant_item, _call_item, _output_item, _reasoning_item, _custom_items
        ),
        max_size=6,
    ).map(lambda xs: [i for x in xs for i in (x if isinstance(x, list) else [x])]),
    st.lists(_responses_tool, max_size=2),
)

ROUTES = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses"}


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        CHAT.map(lambda b: ("chat", b)),
        ANTHROPIC.map(lambda b: ("anthropic", b)),
        RESPONSES.map(lambda b: ("responses", b)),
    )
)
def test_every_dialect_round_trips_exactly(case: tuple[str, dict[str, Any]]) -> None:
    dialect, body = case
    conversation = records.conversation_of(body, ROUTES[dialect])
    assert conversation is not None
    assert records.to_dialect(conversation, dialect) == body
    # read without its route, a body is recognised by its shape
    assert records.conversation_of(body) is not None


@settings(max_examples=150, deadline=None)
@given(st.one_of(CHAT, ANTHROPIC, RESPONSES))
def test_canonical_form_is_the_one_records_on_the_log_were_fingerprinted_with(
    body: dict[str, Any],
) -> None:
    assert canonical.canonical_messages(body) == _v1_canonical_messages(body)


def _system_leads(body: dict[str, Any]) -> bool:
    """Anthropic has one system prompt, before the conversation: a chat system or
    developer message later in a conversation has no place there."""
    roles = [m["role"] for m in body["messages"]]
    heads = len(roles) - len([r for r in roles if r not in ("system", "developer")])
    return all(r in ("system", "developer") for r in roles[:heads])


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        CHAT.filter(_system_leads).map(lambda b: ("chat", b)),
        ANTHROPIC.map(lambda b: ("anthropic", b)),
    )
)
def test_across_dialects_the_model_sees_the_same_conversation(
    case: tuple[str, dict[str, Any]],
) -> None:
    dialect, body = case
    conversation = records.conversation_of(body, ROUTES[dialect])
    assert conversation is not None
    for other in ("chat", "anthropic", "responses"):
        again = records.conversation_of(records.to_dialect(conversation, other), ROUTES[other])
        assert again is not None
        assert _seen(again.flat()) == _seen(conversation.flat())
        assert [t.name for t in again.tools] == [t.name for t in conversation.tools]


def _seen(messages: Any) -> list[Any]:
    """What a model sees, dialect-independent: the sequence of system text, other text
    (by speaker), tool calls and tool results. Empty texts and message boundaries are
    not part of it (dialects split and join turns differently)."""
    system = ""
    atoms: list[Any] = []
    for m in merged(tuple(messages)):
        # chat completions writes an assistant turn's calls after its text
        calls_last = (
            sorted(m.parts, key=lambda p: isinstance(p, ToolCall))
            if m.role == "assistant"
            else m.parts
        )
        for p in calls_last:
            if isinstance(p, ToolCall):
                atoms.append(("call", p.name, p.arguments))
            elif isinstance(p, ToolResult):
                atoms.append(("result", p.call_id, p.text()))
            elif isinstance(p, Text) and p.text:
                if m.role in ("system", "developer"):
                    system += p.text
                else:
                    atoms.append(("assistant" if m.role == "assistant" else "user", p.text))
    return [system, atoms]


# -- answers ---------------------------------------------------------------------------


def test_a_streamed_anthropic_tool_call_reads_like_the_buffered_message() -> None:
    buffered = {
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "plan", "signature": "s1"},
            {"type": "text", "text": "I'll write it."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "Write",
                "input": {"file_path": "a.txt", "content": "hi"},
            },
        ],
        "stop_reason": "tool_use",
    }
    sse = "".join(
        [
            _sse(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "m",
                        "type": "message",
                        "role": "assistant",
                        "content": [],
                        "stop_reason": None,
                    },
                },
            ),
            _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            ),
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": "plan"},
                },
            ),
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "signature_delta", "signature": "s1"},
                },
            ),
            _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "text_delta", "text": "I'll write it."},
                },
            ),
            _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 2,
                    "content_block": {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Write",
                        "input": {},
                    },
                },
            ),
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 2,
                    "delta": {"type": "input_json_delta", "partial_json": '{"file_path": "a.txt",'},
                },
            ),
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 2,
                    "delta": {"type": "input_json_delta", "partial_json": ' "content": "hi"}'},
                },
            ),
            _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}}),
            _sse("message_stop", {"type": "message_stop"}),
        ]
    )
    recorded = {
        "stream": True,
        "message": {"role": "assistant", "content": "I'll write it."},
        "sse": sse,
    }
    streamed = records.answer_of(recorded, "/v1/messages")
    assert streamed == records.answer_of(buffered, "/v1/messages")
    (message,) = streamed
    assert isinstance(message.parts[0], Reasoning)
    (call,) = message.tool_calls()
    assert (call.id, call.name, call.arguments) == (
        "toolu_1",
        "Write",
        {"file_path": "a.txt", "content": "hi"},
    )
    assert canonical.canonical_answer(recorded, "/v1/messages") == [
        "assistant",
        "I'll write it.",
        [["Write", {"file_path": "a.txt", "content": "hi"}]],
    ]


def test_streamed_chat_tool_call_deltas_are_joined() -> None:
    chunks = [
        {
            "object": "chat.completion.chunk",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "Write", "arguments": ""},
                            }
                        ],
                    },
                }
            ],
        },
        {
            "object": "chat.completion.chunk",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"path": '}}]},
                }
            ],
        },
        {
            "object": "chat.completion.chunk",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"a"}'}}]},
                    "finish_reason": "tool_calls",
                }
            ],
        },
    ]
    sse = "".join(_sse(None, c) for c in chunks) + "data: [DONE]\n\n"
    (message,) = records.answer_of(
        {"stream": True, "sse": sse, "message": {}}, "/v1/chat/completions"
    )
    (call,) = message.tool_calls()
    assert (call.id, call.name, call.arguments, call.raw_arguments) == (
        "call_1",
        "Write",
        {"path": "a"},
        '{"path": "a"}',
    )


def test_a_responses_answer_is_its_output_items() -> None:
    response = {
        "object": "response",
        "output": [
            {"type": "reasoning", "id": "rs", "summary": []},
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "shell",
                "arguments": '{"command": ["ls"]}',
            },
        ],
    }
    answer = records.answer_of(response, "/v1/responses")
    assert [m.role for m in answer] == ["assistant", "assistant"]
    assert canonical.canonical_answer(response, "/v1/responses") == [
        "assistant",
        "",
        [["shell", {"command": ["ls"]}]],
    ]
    streamed = {"stream": True, "message": {}, "response": response, "sse": ""}
    assert records.answer_of(streamed, "/v1/responses") == answer
    done_only = _sse(
        None,
        {"type": "response.output_item.done", "output_index": 0, "item": response["output"][1]},
    )
    assert (
        records.answer_of({"stream": True, "sse": done_only, "message": {}}, "/v1/responses")
        == answer[1:]
    )


def _sse(name: str | None, data: Any) -> str:
    return (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n"


def test_streams_skip_junk() -> None:
    assert streams.events("data: {oops\n\n: comment\n\ndata: [DONE]\n\n") == []


# -- the canonical form as it was defined before the conversation model ----------------
# (kept verbatim as the compatibility oracle: fingerprints on the log were made with it)

_V1_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def _v1_canonical_messages(request: Any) -> list[list[Any]] | None:
    if not isinstance(request, dict):
        return None
    out: list[list[Any]] = []
    for head in ("system", "instructions"):
        if request.get(head):
            out.append(["system", _v1_text(request[head]), []])
    if isinstance(request.get("messages"), list):
        out.extend(_v1_message(m) for m in request["messages"])
        return out
    items = request.get("input")
    if isinstance(items, str):
        return [*out, ["user", items, []]]
    if isinstance(items, list):
        return out + [m for m in (_v1_item(i) for i in items) if m is not None]
    return None


def _v1_message(message: Any) -> list[Any]:
    if not isinstance(message, dict):
        return ["?", str(message), []]
    role = str(message.get("role"))
    content = message.get("content")
    calls = [_v1_openai_call(c) for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if isinstance(content, list):
        blocks = [b for b in content if isinstance(b, dict)]
        calls += [[b.get("name"), b.get("input")] for b in blocks if b.get("type") == "tool_use"]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if results:
            text = "".join(_v1_text(b.get("content")) for b in results) + _v1_text(content)
            return ["tool", text, calls]
    return [role, _v1_text(content), calls]


def _v1_item(item: Any) -> list[Any] | None:
    if not isinstance(item, dict):
        return None
    kind = item.get("type", "message")
    if kind == "message":
        return _v1_message(item)
    if kind == "function_call":
        return ["assistant", "", [[item.get("name"), _v1_arguments(item.get("arguments"))]]]
    if kind == "function_call_output":
        return ["tool", _v1_text(item.get("output")), []]
    return None


def _v1_openai_call(call: dict[str, Any]) -> list[Any]:
    function = call.get("function")
    if not isinstance(function, dict):
        return [None, None]
    return [function.get("name"), _v1_arguments(function.get("arguments"))]


def _v1_arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _v1_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type", "text") in _V1_TEXT_PARTS
        )
    return json.dumps(content, sort_keys=True)
