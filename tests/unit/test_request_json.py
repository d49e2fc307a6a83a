"""What a request body must be to be served (reef.api.inputs): a JSON object in UTF-8 that
can be recorded and read back as JSON; the text kept is the body's own."""

from __future__ import annotations

import pytest

from reef.api.inputs import MAX_DEPTH, decoded_object, parse_object
from reef.core.errors import RequestError

AGENT_LIKE = '{"model":"m","system":"🤖 café","messages":[{"role":"user","content":"hi"}]}'


def test_the_text_is_the_bodys_own_and_the_object_what_it_holds() -> None:
    text, value = decoded_object(AGENT_LIKE.encode())
    assert text == AGENT_LIKE
    assert value["system"] == "🤖 café"
    assert parse_object(AGENT_LIKE.encode()) == value


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"a": "\xff"}', "utf-8"),
        ('{"a": 1}'.encode("utf-16"), "utf-8"),
        (b'{"a": NaN}', "NaN is not a JSON value"),
        (b'{"a": 1e400}', "out of range"),
        (b'{"a": "\\ud800"}', "unpaired surrogate"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "must be a JSON object"),
        (b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), "nested deeper"),
        (b"[1]", "must be a JSON object"),
        (b'{"a": 1', "not valid JSON"),
    ],
)
def test_what_cannot_be_recorded_as_json_is_refused_with_400(body: bytes, why: str) -> None:
    with pytest.raises(RequestError) as caught:
        decoded_object(body)
    assert caught.value.status == 400
    assert caught.value.code == "invalid_json"
    assert why in caught.value.message
