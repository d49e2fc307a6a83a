"""Message fingerprints (reef.core.fingerprints): what matching compares, what it ignores,
and that they are keyed (no content can be tested against them without the key)."""

from __future__ import annotations

from reef.core import fingerprints as fp

KEY = fp.scenario_key(b"secret", "demo")


def test_the_same_conversation_has_the_same_fingerprints_in_both_dialects() -> None:
    openai = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        ],
        "tools": [{"type": "function", "function": {"name": "weather"}}],
    }
    anthropic = {
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_9",
                        "name": "weather",
                        "input": {"city": "Oslo"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "rain"}],
            },
        ],
        "tools": [{"name": "weather", "input_schema": {}}],
    }
    a, b = fp.request_fingerprints(KEY, openai), fp.request_fingerprints(KEY, anthropic)
    assert a == b and a is not None
    assert [fp.role_of(f) for f in a] == ["system", "user", "assistant", "tool"]
    assert fp.has_tools(openai) and fp.has_tools(anthropic)
    assert not fp.has_tools({"messages": []})


def test_the_answer_fingerprint_equals_that_message_quoted_in_the_next_request() -> None:
    openai = {"choices": [{"message": {"role": "assistant", "content": "4"}}]}
    anthropic = {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "4"}]}
    assembled = {"stream": True, "message": {"role": "assistant", "content": "4"}}
    quoted = fp.request_fingerprints(KEY, {"messages": [{"role": "assistant", "content": "4"}]})
    assert quoted is not None
    for response in (openai, anthropic, assembled):
        assert fp.answer_fingerprint(KEY, response) == quoted[0]
    assert fp.answer_fingerprint(KEY, {"error": "x"}) is None


def test_fingerprints_are_keyed_per_scenario_and_secret_and_carry_no_text() -> None:
    request = {"messages": [{"role": "user", "content": "yes"}]}
    mine = fp.request_fingerprints(KEY, request)
    assert mine is not None and "yes" not in mine[0]
    assert fp.request_fingerprints(fp.scenario_key(b"secret", "other"), request) != mine
    assert fp.request_fingerprints(fp.scenario_key(b"other secret", "demo"), request) != mine
    changed = {"messages": [{"role": "user", "content": "yes!"}]}
    assert fp.request_fingerprints(KEY, changed) != mine


def test_the_responses_route_input_items_are_messages_calls_and_outputs() -> None:
    request = {
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "call_id": "c", "name": "weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "rain"},
        ],
    }
    got = fp.request_fingerprints(KEY, request)
    assert got is not None
    assert [fp.role_of(f) for f in got] == ["system", "user", "assistant", "tool"]
    assert fp.request_fingerprints(KEY, {"input": "hi"}) is not None
    assert fp.request_fingerprints(KEY, {"prompt": "hi"}) is None
