"""Tool-call parsers on model text: every format, parallel calls, malformed output as text,
and where a stream must stop showing text because a call may begin."""

from __future__ import annotations

import json

import pytest

from reef.engine.errors import EngineError
from reef.engine.tool_parsers import (
    PARSERS,
    HermesParser,
    Llama3Parser,
    Parsed,
    ParsedCall,
    PythonicParser,
    parser_for,
)
from reef.engine.turns import ToolChoice, ToolUse, tool_choice_of

TOOLS = frozenset({"get_weather", "get_time"})


def _call(name: str, **arguments: object) -> ParsedCall:
    return ParsedCall(name, json.dumps(arguments))


# -- qwen25 / hermes ----------------------------------------------------------------


def test_hermes_reads_one_call_and_the_text_before_it() -> None:
    call = '{"name": "get_weather", "arguments": {"city": "paris"}}'
    text = f"let me look.\n<tool_call>\n{call}\n</tool_call>"
    assert HermesParser().parse(text, TOOLS) == Parsed(
        "let me look.", (_call("get_weather", city="paris"),)
    )


def test_hermes_reads_parallel_calls_in_order() -> None:
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "oslo"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {"zone": "cet", "h24": true}}</tool_call>'
    )
    parsed = HermesParser().parse(text, TOOLS)
    assert parsed.text == ""
    assert parsed.calls == (
        _call("get_weather", city="oslo"),
        _call("get_time", zone="cet", h24=True),
    )


def test_hermes_accepts_a_last_call_without_its_closing_tag() -> None:
    text = '<tool_call>{"name": "get_time", "arguments": {}}'
    assert HermesParser().parse(text, TOOLS).calls == (_call("get_time"),)


def test_hermes_accepts_arguments_given_as_json_text() -> None:
    text = '<tool_call>{"name": "get_time", "arguments": "{\\"zone\\": \\"utc\\"}"}</tool_call>'
    assert HermesParser().parse(text, TOOLS).calls == (_call("get_time", zone="utc"),)


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>',  # cut JSON
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',  # not offered
        '<tool_call>["get_weather"]</tool_call>',  # not an object
        '<tool_call>{"name": "get_time", "arguments": [1]}</tool_call>',  # arguments a list
        '<tool_call>{"name": "get_time"<tool_call>{"name": "get_time"}</tool_call>',
    ],
)
def test_hermes_returns_malformed_output_whole_as_text(text: str) -> None:
    assert HermesParser().parse(text, TOOLS) == Parsed(text)


def test_hermes_holds_streamed_text_from_a_possible_opening_tag() -> None:
    parser = HermesParser()
    assert parser.held_from("sure <tool_call>{") == len("sure ")
    assert parser.held_from("sure <tool") == len("sure ")
    assert parser.held_from("sure, 2 < 3") == len("sure, 2 < 3")


# -- llama3 -------------------------------------------------------------------------


def test_llama3_reads_a_json_call_with_parameters() -> None:
    text = '{"name": "get_weather", "parameters": {"city": "rome"}}'
    assert Llama3Parser().parse(text, TOOLS) == Parsed("", (_call("get_weather", city="rome"),))


def test_llama3_reads_calls_after_the_python_tag_separated_by_semicolons() -> None:
    text = (
        'checking<|python_tag|>{"name": "get_weather", "parameters": {"city": "rome"}}; '
        '{"name": "get_time", "arguments": {"zone": "cet"}}'
    )
    parsed = Llama3Parser().parse(text, TOOLS)
    assert parsed.text == "checking"
    assert parsed.calls == (_call("get_weather", city="rome"), _call("get_time", zone="cet"))


@pytest.mark.parametrize(
    "text",
    [
        "the weather is fine",
        '{"name": "get_weather", "parameters": {"city": "rome"}} and more words',
        '{"city": "rome"}',  # JSON, but no name
        '{"name": "get_weather", "parameters": {"city": ',
    ],
)
def test_llama3_returns_anything_but_whole_calls_as_text(text: str) -> None:
    assert Llama3Parser().parse(text, TOOLS) == Parsed(text)


def test_llama3_holds_an_output_that_opens_as_json() -> None:
    parser = Llama3Parser()
    assert parser.held_from('{"na') == 0
    assert parser.held_from("  ") == 0
    assert parser.held_from("hello") == len("hello")
    assert parser.held_from("hi <|python") == len("hi ")


# -- pythonic (the tiny model's syntax) -----------------------------------------------


def test_pythonic_reads_calls_with_python_and_json_literals() -> None:
    text = '[get_weather(city="paris", days=3, metric=true), get_time(zone=None, at=[1, 2.5])]'
    parsed = PythonicParser().parse(text, TOOLS)
    assert parsed.text == ""
    assert parsed.calls == (
        _call("get_weather", city="paris", days=3, metric=True),
        _call("get_time", zone=None, at=[1, 2.5]),
    )


def test_pythonic_keeps_text_around_the_call_list() -> None:
    text = 'one moment. [get_time(zone="utc")] done'
    assert PythonicParser().parse(text, TOOLS) == Parsed(
        "one moment.  done", (_call("get_time", zone="utc"),)
    )


def test_pythonic_finds_the_end_past_brackets_inside_strings() -> None:
    text = '[get_weather(city="a]b")]'
    assert PythonicParser().parse(text, TOOLS).calls == (_call("get_weather", city="a]b"),)


@pytest.mark.parametrize(
    "text",
    [
        '[get_weather("paris")]',  # positional
        '[get_weather(city="paris"',  # never closed
        '[unknown(city="paris")]',  # not offered
        "[get_weather(city=paris)]",  # a bare name, not a literal
        "[get_weather(city={1, 2})]",  # a set: not JSON
        "see [1, 2]",  # a list, no call
    ],
)
def test_pythonic_returns_malformed_output_whole_as_text(text: str) -> None:
    assert PythonicParser().parse(text, TOOLS) == Parsed(text)


def test_no_tools_offered_means_no_call_is_read() -> None:
    for parser in PARSERS.values():
        assert parser.parse('[get_time(zone="utc")]', frozenset()).calls == ()


# -- choosing a parser, tool choice ---------------------------------------------------


def test_parsers_are_chosen_by_sglang_name_and_builtins_default_to_pythonic() -> None:
    assert isinstance(parser_for("qwen25", "/models/qwen"), HermesParser)
    assert isinstance(parser_for("llama3", "tiny"), Llama3Parser)
    assert isinstance(parser_for(None, "tiny"), PythonicParser)
    assert parser_for(None, "/models/qwen") is None
    with pytest.raises(EngineError, match="unknown tool-call parser 'mistral'"):
        parser_for("mistral", "tiny")


def test_without_parallel_calls_only_the_first_call_is_kept() -> None:
    use = ToolUse(PythonicParser(), TOOLS, parallel=False)
    parsed = use.parse('[get_time(zone="a"), get_time(zone="b")]')
    assert parsed.calls == (_call("get_time", zone="a"),)


def test_tool_choice_reads_each_dialects_spelling() -> None:
    assert tool_choice_of({}, "chat") == ToolChoice("auto")
    assert tool_choice_of({"tool_choice": "none"}, "chat") == ToolChoice("none")
    named = {"tool_choice": {"type": "function", "function": {"name": "f"}}}
    assert tool_choice_of({**named, "parallel_tool_calls": False}, "chat") == ToolChoice(
        "named", "f", parallel=False
    )
    assert tool_choice_of({"tool_choice": {"type": "function", "name": "f"}}, "responses") == (
        ToolChoice("named", "f")
    )
    assert tool_choice_of({"tool_choice": {"type": "any"}}, "anthropic") == ToolChoice("required")
    chosen = {"type": "tool", "name": "f", "disable_parallel_tool_use": True}
    assert tool_choice_of({"tool_choice": chosen}, "anthropic") == ToolChoice(
        "named", "f", parallel=False
    )
    with pytest.raises(EngineError, match="tool_choice"):
        tool_choice_of({"tool_choice": "sometimes"}, "chat")
    with pytest.raises(EngineError, match="tool_choice"):
        tool_choice_of({"tool_choice": "auto"}, "anthropic")
