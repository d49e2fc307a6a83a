"""Reading a request by what is new in it gives exactly what parsing it whole gives.

Every case compares :meth:`RecentRequests.read` with :func:`decoded_object` on the same
bytes: the same text and object, or the same error. The counters say which way a
request was read, so a test cannot pass by parsing everything whole.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reef.api.inputs import MAX_DEPTH, decoded_object
from reef.api.rereading import RecentRequests, lay_out
from reef.core.errors import RequestError
from tests.support.api import claude_code_turns


def read_both(recent: RecentRequests, session: str, raw: bytes) -> tuple[str, dict[str, Any]]:
    """``recent``'s reading of ``raw``, checked against the whole parse (or its error)."""
    try:
        want = decoded_object(raw)
    except RequestError as exc:
        with pytest.raises(RequestError) as got:
            recent.read(session, raw)
        assert (got.value.status, str(got.value)) == (exc.status, str(exc))
        raise
    got_text, got_body = recent.read(session, raw)
    assert got_text == want[0]
    assert got_body == want[1]
    assert list(got_body) == list(want[1])  # the members' order too
    return got_text, got_body


def test_an_agents_next_turns_are_read_by_what_is_new() -> None:
    recent = RecentRequests()
    turns = claude_code_turns()
    for raw in turns:
        read_both(recent, "s", raw)
    assert (recent.parsed, recent.reread) == (1, 2)
    # the same turns again, one after the other, and the first after the last
    for raw in (turns[0], turns[2], turns[2]):
        read_both(recent, "s", raw)
    assert (recent.parsed, recent.reread) == (1, 5)


def test_what_the_caller_changes_is_its_own() -> None:
    recent = RecentRequests()
    turns = claude_code_turns()
    _, body = read_both(recent, "s", turns[0])
    body["model"] = "rewritten"
    _, body = read_both(recent, "s", turns[1])
    body["model"] = "rewritten"
    body["messages"].append({"role": "user", "content": "appended by the caller"})
    read_both(recent, "s", turns[2])
    assert recent.reread == 2


def test_sessions_are_read_against_their_own_latest_request() -> None:
    recent = RecentRequests()
    one, other = (orjson.dumps({"model": m, "messages": [m], "x": 1}) for m in ("a", "b"))
    read_both(recent, "one", one)
    read_both(recent, "other", other)
    read_both(recent, "one", orjson.dumps({"model": "a", "messages": ["a", "c"], "x": 1}))
    assert (recent.parsed, recent.reread) == (2, 1)


@pytest.mark.parametrize(
    "raw",
    [
        # the list closed early and a second member of its name: the last one wins
        b'{"model":"m","messages":[1,2],"messages":[3],"t":0}',
        # a string left open across the tail
        b'{"model":"m","messages":[1,"2],"t":0}',
        # a number that goes on past the element compared (1 of 12)
        b'{"model":"m","messages":[12],"t":0}',
        # whitespace the layout does not have
        b'{"model":"m","messages":[1, 2],"t":0}',
        b'{"model":"m","messages":[1,2] ,"t":0}',
        # a trailing comma, a missing one
        b'{"model":"m","messages":[1,2,],"t":0}',
        b'{"model":"m","messages":[1 2],"t":0}',
        # the list emptied, and only a comma left
        b'{"model":"m","messages":[],"t":0}',
        b'{"model":"m","messages":[,],"t":0}',
        # invalid UTF-8, an unpaired surrogate, NaN in what is new
        b'{"model":"m","messages":[1,"\xff"],"t":0}',
        b'{"model":"m","messages":[1,"\\ud800"],"t":0}',
        b'{"model":"m","messages":[1,NaN],"t":0}',
    ],
)
def test_bytes_that_only_look_like_a_next_turn_read_as_the_whole_parse(raw: bytes) -> None:
    recent = RecentRequests()
    read_both(recent, "s", b'{"model":"m","messages":[1],"t":0}')
    with contextlib.suppress(RequestError):  # then both raised the same error
        read_both(recent, "s", raw)


def test_what_is_new_is_held_to_the_nesting_limit() -> None:
    recent = RecentRequests()
    read_both(recent, "s", b'{"messages":[1]}')

    def nested(levels: int) -> bytes:  # the body, the list, then ``levels`` more
        return b'{"messages":[1,' + b"[" * levels + b"]" * levels + b"]}"

    read_both(recent, "s", nested(MAX_DEPTH - 2))
    assert recent.reread == 1
    with pytest.raises(RequestError, match=f"nested deeper than {MAX_DEPTH} levels"):
        read_both(recent, "s", nested(MAX_DEPTH - 1))


def test_only_requests_as_orjson_writes_them_are_laid_out() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hé 🤖"}], "t": 1.5}
    for raw in (json.dumps(body).encode(), json.dumps(body, indent=1).encode()):
        assert lay_out(raw, json.loads(raw)) is None
    raw = orjson.dumps(body)
    layout = lay_out(raw, orjson.loads(raw))
    assert layout is not None
    assert layout.head + b"".join(layout.pieces) + layout.tail == raw
    assert layout.head_text + "".join(layout.texts) + layout.tail_text == raw.decode()
    assert lay_out(b'{"model":"m"}', {"model": "m"}) is None  # no list


def test_the_layouts_held_stay_within_their_bytes() -> None:
    recent = RecentRequests(max_bytes=1_000)
    for n in range(40):
        read_both(recent, f"s{n}", orjson.dumps({"messages": ["x" * 90], "n": n}))
        assert recent.held <= 1_000
    read_both(recent, "big", orjson.dumps({"messages": ["x" * 2_000]}))
    assert recent.held <= 1_000


# -- properties ------------------------------------------------------------------------

TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), TEXT)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=8,
)
MEMBERS = st.dictionaries(st.sampled_from(["model", "system", "tools", "stream"]), VALUE)


@st.composite
def sessions(draw: st.DrawFn) -> list[bytes]:
    """Requests of one session: each the one before with its list's end changed, a
    member changed now and then, written by orjson, or by json now and then."""
    name = draw(st.sampled_from(["messages", "input"]))
    before, after = draw(MEMBERS), draw(MEMBERS)
    items = draw(st.lists(VALUE, max_size=4))
    out = []
    for _ in range(draw(st.integers(1, 5))):
        keep = draw(st.integers(0, len(items)))
        items = items[:keep] + draw(st.lists(VALUE, max_size=3))
        if draw(st.integers(0, 5)) == 0:
            after = draw(MEMBERS)
        body = {**{k: v for k, v in before.items() if k != name}, name: items}
        body.update({k: v for k, v in after.items() if k not in body})
        styled = draw(st.sampled_from(["orjson", "orjson", "orjson", "json"]))
        out.append(orjson.dumps(body) if styled == "orjson" else json.dumps(body).encode())
    return out


@settings(max_examples=300, deadline=None)
@given(sessions())
def test_a_session_reads_as_its_whole_parse(raws: list[bytes]) -> None:
    recent = RecentRequests()
    for raw in raws:
        read_both(recent, "s", raw)
