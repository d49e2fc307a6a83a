"""The laws that make a body stored as blocks read back byte for byte, with no check at
run time: whatever request :func:`reef.crypto.blocks.split` accepts, in any of its
styles, with cache breakpoints anywhere in a content part, assembles to its exact text;
a caller's parsed object, current or changed since, never changes what is stored; and a
block's address is its digest whatever the scope's previous request held.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reef.crypto import blocks
from reef.services.bodystore import RecentBlocks
from reef_dev.agent_session import AgentSession

LAWS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
marks = st.sampled_from([{"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}])


@st.composite
def parts(draw: st.DrawFn) -> dict[str, Any]:
    """A content part, its ``cache_control`` (if any) at any place among its keys."""
    part: dict[str, Any] = {"type": "text", "text": draw(st.text(max_size=20))}
    part.update(
        draw(st.dictionaries(st.sampled_from(["citations", "id", "x"]), values, max_size=2))
    )
    if draw(st.booleans()):
        items = list(part.items())
        at = draw(st.integers(0, len(items)))
        items.insert(at, (blocks.MARK, draw(marks)))
        part = dict(items)
    return part


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    content: Any = draw(st.text(max_size=20) | st.lists(parts(), max_size=3))
    message = {"role": draw(st.sampled_from(["user", "assistant"])), "content": content}
    if draw(st.booleans()):
        message = {"name": draw(st.text(max_size=5)), **message}
    return message


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A request body: the fields stored as blocks (some or none), other members, in
    any order."""
    members: list[tuple[str, Any]] = [("model", draw(st.text(max_size=8)))]
    if draw(st.booleans()):
        members.append(("system", draw(st.text(max_size=20) | st.lists(parts(), max_size=3))))
    if draw(st.booleans()):
        members.append(
            ("tools", draw(st.lists(st.dictionaries(st.text(max_size=5), values), max_size=2)))
        )
    for name in ("messages", "input"):
        if draw(st.booleans()):
            members.append((name, draw(st.lists(messages(), max_size=4) | st.text(max_size=5))))
    if draw(st.booleans()):
        members.append(("instructions", draw(values)))
    members += draw(
        st.lists(st.tuples(st.sampled_from(["metadata", "stream", "z"]), values), max_size=2)
    )
    return dict(draw(st.permutations(members)))


def write(body: dict[str, Any], style: str) -> str:
    if style == "orjson":
        return orjson.dumps(body).decode()
    if style == "compact":
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(body)


def reassembled(parts_of: blocks.Split) -> str:
    """What a manifest of ``parts_of`` assembles to, its blocks in one pack."""
    pack: list[bytes] = []
    located: dict[str, list[blocks.Located]] = {}
    for name, elements in parts_of.fields.items():
        located[name] = []
        for element in elements:
            located[name].append(blocks.Located("r", "sha256:p", len(pack)))
            pack.append(element.block)
    plan = blocks.read_manifest(blocks.manifest(parts_of, located))
    packs = [blocks.unpack(blocks.pack(pack))] if plan.packs else []
    text, complete = blocks.assemble(plan, packs)
    assert complete
    return text


@LAWS
@given(requests(), st.sampled_from(["orjson", "compact", "python"]))
def test_every_split_request_assembles_to_its_exact_text(body: dict[str, Any], style: str) -> None:
    text = write(body, style)
    found = blocks.split(text)
    if not any(name in body for name in (*blocks.SINGLE, *blocks.LISTS)):
        assert found is None
        return
    assert found is not None
    assert reassembled(found) == text


@LAWS
@given(requests())
def test_a_callers_parsed_object_stores_what_parsing_the_text_stores(
    body: dict[str, Any],
) -> None:
    text = write(body, "orjson")
    raw = text.encode()
    assert blocks.split(text, blocks.Parsed(raw, json.loads(raw))) == blocks.split(text)
    changed = {**json.loads(raw), "model": "changed since"}
    assert blocks.split(text, blocks.Parsed(raw, changed)) == blocks.split(text)


@LAWS
@given(st.lists(requests(), min_size=2, max_size=4), st.booleans())
def test_a_request_laid_out_against_another_stores_what_parsing_it_stores(
    bodies: list[dict[str, Any]], stale: bool
) -> None:
    earlier: dict[str, list[blocks.Piece]] = {}
    for body in bodies:
        text = write(body, "orjson")
        raw = text.encode()
        parsed = {**json.loads(raw), "model": "changed since"} if stale else json.loads(raw)
        found = blocks.split(text, blocks.Parsed(raw, parsed), earlier)
        assert found == blocks.split(text)
        if found is not None:
            assert reassembled(found) == text
            earlier = found.pieces


def test_an_agent_turn_compares_what_the_previous_turn_sent_instead_of_writing_it() -> None:
    session = AgentSession()
    earlier: dict[str, list[blocks.Piece]] = {}
    for turn in range(4):
        raw = session.body()
        found = blocks.split(raw.decode(), blocks.Parsed(raw, json.loads(raw)), earlier)
        assert found is not None and found == blocks.split(raw.decode())
        assert reassembled(found) == raw.decode()
        if earlier:
            assert found.pieces["system"][0] is earlier["system"][0]
            assert found.pieces["tools"][0] is earlier["tools"][0]
            # every message but the last, whose breakpoint moved to the newest message
            kept = earlier["messages"][:-1]
            assert all(a is b for a, b in zip(found.pieces["messages"], kept, strict=False))
            assert found.pieces["messages"][len(kept)] is not earlier["messages"][-1]
        earlier = found.pieces
        session.respond(turn)


def test_a_number_that_goes_on_past_an_earlier_one_is_not_taken_for_it() -> None:
    first = orjson.dumps({"input": [1, 2], "system": 3})
    second = orjson.dumps({"input": [12, 2], "system": 34})
    before = blocks.split(first.decode(), blocks.Parsed(first, orjson.loads(first)))
    assert before is not None
    found = blocks.split(
        second.decode(), blocks.Parsed(second, orjson.loads(second)), before.pieces
    )
    assert found is not None and found == blocks.split(second.decode())
    assert reassembled(found) == second.decode()


def test_a_callers_object_changed_after_the_split_leaves_it_as_it_was() -> None:
    body: dict[str, Any] = {
        "metadata": {"user_id": "u"},
        "messages": [{"role": "user", "content": "hi"}],
    }
    text = orjson.dumps(body).decode()
    found = blocks.split(text, blocks.Parsed(text.encode(), body))
    assert found is not None
    body["metadata"]["user_id"] = "someone else"
    body["messages"][0]["content"] = "changed"
    assert reassembled(found) == text


def test_a_breakpoint_before_a_parts_last_key_stays_in_its_block() -> None:
    part = {"type": "text", blocks.MARK: {"type": "ephemeral"}, "text": "long context"}
    text = orjson.dumps({"messages": [{"role": "user", "content": [part]}]}).decode()
    found = blocks.split(text)
    assert found is not None
    (element,) = found.fields["messages"]
    assert not element.marks and b"cache_control" in element.block
    assert reassembled(found) == text


@LAWS
@given(st.lists(requests(), min_size=1, max_size=4), st.integers(1, 400))
def test_a_blocks_address_is_its_digest_whatever_came_before(
    bodies: list[dict[str, Any]], max_bytes: int
) -> None:
    recent = RecentBlocks(max_bytes=max_bytes)
    for body in bodies:
        found = blocks.split(write(body, "orjson"))
        if found is None:
            continue
        addresses = recent.addresses(("s", "session"), found)
        assert addresses == {
            name: [blocks.digest(e.block) for e in elements]
            for name, elements in found.fields.items()
        }


def test_the_recent_blocks_stay_within_their_byte_budget() -> None:
    recent = RecentBlocks(max_bytes=1000)
    for n in range(20):
        text = orjson.dumps({"messages": [{"role": "user", "content": "x" * 300}, n]}).decode()
        found = blocks.split(text)
        assert found is not None
        recent.addresses(("s", f"session-{n}"), found)
        assert recent.held <= 1000
    assert recent.held > 0
