"""What a request body must be to be served (reef.api.inputs): a JSON object in UTF-8 that
can be recorded and read back as JSON; the text kept is the body's own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from reef.api.inputs import MAX_DEPTH, decoded_object, parse_object
from reef.core.errors import RequestError

AGENT_LIKE = '{"model":"m","system":"🤖 café","messages":[{"role":"user","content":"hi"}]}'


def test_the_text_is_the_bodys_own_and_the_object_what_it_holds() -> None:
    text, value = decoded_object(AGENT_LIKE.encode())
    assert text == AGENT_LIKE
    assert value["system"] == "🤖 café"
    assert parse_object(AGENT_LIKE.encode()) == value


@pytest.mark.parametrize("read", [parse_object, lambda body: decoded_object(body)[1]])
@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"a": "\xff"}', "utf-8"),
        ('{"a": 1}'.encode("utf-16"), "utf-8"),
        (b'{"a": NaN}', "JSON value"),
        (b'{"a": 1e400}', "infinity"),
        (b'{"a": "\\ud800"}', "surrogate"),
        (b'{"a": "\\udc00 and \\ud83d\\ude00"}', "surrogate"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "must be a JSON object"),
        (b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), "nested deeper"),
        (b'{"a":' * 2000 + b"1" + b"}" * 2000, "nested deeper"),
        (b"[1]", "must be a JSON object"),
        (b'{"a": 1', "not valid JSON"),
    ],
)
def test_what_cannot_be_recorded_as_json_is_refused_with_400(
    read: Callable[[bytes], dict[str, Any]], body: bytes, why: str
) -> None:
    with pytest.raises(RequestError) as caught:
        read(body)
    assert caught.value.status == 400
    assert caught.value.code == "invalid_json"
    assert why in caught.value.message


def test_the_deepest_body_and_valid_surrogate_pairs_are_read_alike() -> None:
    deepest = b'{"a":' * (MAX_DEPTH - 1) + b'"\\ud83d\\ude00"' + b"}" * (MAX_DEPTH - 1)
    assert decoded_object(deepest)[1] == parse_object(deepest)


def test_a_relayed_requests_integer_beyond_64_bits_is_read_as_a_float_and_kept_as_sent() -> None:
    body = b'{"seed": 123456789012345678901234567890, "n": 18446744073709551615}'
    text, value = decoded_object(body)
    assert text == body.decode()
    assert value == {"seed": 1.2345678901234568e29, "n": 18446744073709551615}
    assert parse_object(body)["seed"] == 123456789012345678901234567890
