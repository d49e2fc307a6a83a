"""Setting a request body's members in its own bytes (reef.api.raw_json)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reef.api.raw_json import member_spans, with_members

BODY = (
    b'{ "model" : "claude-x",\n  "system": [{"type":"text","text":"Caf\xc3\xa9 \\u00e9 rules",'
    b'"cache_control":{"type":"ephemeral"}}],\n'
    b'  "tools":[ {"name":"search","input_schema":{"type":"object"},'
    b'"cache_control": {"type": "ephemeral", "ttl": "1h"}} ],"max_tokens":64,\n'
    b'  "messages":[{"role":"user","content":"hi"}]  }\n'
)


def test_spans_are_the_members_bytes() -> None:
    spans = member_spans(BODY)
    assert list(spans) == ["model", "system", "tools", "max_tokens", "messages"]
    for key, (start, end) in spans.items():
        assert json.loads(BODY[start:end]) == json.loads(BODY)[key]


def test_a_set_member_changes_and_no_other_byte_does() -> None:
    out = with_members(BODY, {"model": "forced-model"})
    assert json.loads(out) == {**json.loads(BODY), "model": "forced-model"}
    assert out == BODY.replace(b'"claude-x"', b'"forced-model"')
    before, after = member_spans(BODY), member_spans(out)
    for key in ("system", "tools", "messages"):
        assert out[slice(*after[key])] == BODY[slice(*before[key])]


def test_an_absent_member_is_appended_before_the_closing_brace() -> None:
    out = with_members(BODY, {"lora_path": "adapter-1", "logprobs": True})
    assert json.loads(out) == {**json.loads(BODY), "lora_path": "adapter-1", "logprobs": True}
    assert out.startswith(BODY[: BODY.rindex(b"}")].rstrip())
    assert with_members(b"{}", {"a": 1}) == b'{"a": 1}'
    assert json.loads(with_members(b" { } ", {"a": [1]})) == {"a": [1]}


def test_a_repeated_key_sets_the_value_a_reader_keeps() -> None:
    out = with_members(b'{"model": "a", "x": 1, "model": "b"}', {"model": "c"})
    assert out == b'{"model": "a", "x": 1, "model": "c"}'
    assert json.loads(out)["model"] == "c"


@pytest.mark.parametrize(
    "raw",
    [b"[1, 2]", b'{"a": 1} {"b": 2}', b'{"a" 1}', b'{"a": 1,}', b'{"a": 1', b'"text"'],
    ids=["array", "two-objects", "no-colon", "trailing-comma", "unclosed", "string"],
)
def test_spans_refuse_what_is_not_one_json_object(raw: bytes) -> None:
    with pytest.raises(ValueError):
        member_spans(raw)


def test_a_body_in_another_json_encoding_is_rewritten_whole() -> None:
    raw = json.dumps({"model": "m", "system": "é"}).encode("utf-16")
    assert json.loads(with_members(raw, {"model": "n"})) == {"model": "n", "system": "é"}


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    body=st.dictionaries(st.text(max_size=6), _values, max_size=6),
    members=st.dictionaries(st.sampled_from(["model", "logprobs", "x"]), _values, max_size=3),
    separators=st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " : ")]),
    ascii_only=st.booleans(),
)
def test_setting_members_keeps_every_other_member_byte_for_byte(
    body: dict[str, Any],
    members: dict[str, Any],
    separators: tuple[str, str],
    ascii_only: bool,
) -> None:
    raw = json.dumps(body, separators=separators, ensure_ascii=ascii_only).encode()
    out = with_members(raw, members)
    assert json.loads(out) == {**body, **members}
    before, after = member_spans(raw), member_spans(out)
    for key in body.keys() - members.keys():
        assert out[slice(*after[key])] == raw[slice(*before[key])]
