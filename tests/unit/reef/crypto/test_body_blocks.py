"""Requests stored as content-addressed blocks shared within a session.

* splitting and assembling is byte-exact (both serialization styles), a moved cache
  breakpoint does not make a message a new block, and a body in another style is not
  split;
* through the event store (embedded log, local artifact store, real key table): an
  agent session is stored in a fraction of what the agent sent and reads back byte for
  byte; erasing the first record makes what it introduced unreadable in every later
  record (``{"erased": true}`` in place, the record partly erased), in the raw log, the
  artifact store and every sample that copies them; a record never references a block
  of a record whose append failed; a reader given no artifact store reports such a
  record unreadable instead of reading its request as absent, and a stream passing over
  a claim-checked answer whose object is gone still assembles the request.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from reef.artifacts.claimcheck import ClaimCheck, parse_ref
from reef.artifacts.errors import ArtifactError
from reef.artifacts.local import LocalArtifactStore
from reef.artifacts.store import ObjectRef
from reef.core.errors import LogUnavailableError
from reef.core.events import InferenceRecorded, SampleJoined, utc_now
from reef.core.sealed import sealed_copy
from reef.core.topics import INFERENCE, LOG_TOPICS, SAMPLES
from reef.crypto import blocks
from reef.crypto.rings import TableKeyRing
from reef.history import EventStream
from reef.log.base import PendingAppend, Position
from reef.log.embedded import EmbeddedLog
from reef.services.bodystore import BlockIndex, Staged
from reef.services.eventstore import EventStore
from reef_dev.agent_session import AgentSession
from reef_dev.events import inference

CARD = "4111 1111 1111 1111"
SCENARIO = "s"


def reassembled(parts: blocks.Split) -> str:
    """The body a manifest of ``parts`` assembles to, every block in one pack."""
    pack: list[bytes] = []
    located: dict[str, list[blocks.Located]] = {}
    for name, elements in parts.fields.items():
        located[name] = []
        for element in elements:
            located[name].append(blocks.Located("r", "sha256:p", len(pack)))
            pack.append(element.block)
    plan = blocks.read_manifest(blocks.manifest(parts, located))
    packs = [blocks.unpack(blocks.pack(pack))] if plan.packs else []
    text, complete = blocks.assemble(plan, packs)
    assert complete
    return text


def test_an_agent_request_splits_and_assembles_byte_exactly() -> None:
    session = AgentSession()
    for turn in range(4):
        text = session.body().decode()
        parts = blocks.split(text)
        assert parts is not None and parts.style == "orjson"
        assert reassembled(parts) == text
        assert set(parts.fields) == {"system", "tools", "messages"}
        assert len(parts.fields["messages"]) == 1 + 2 * turn
        session.respond(turn)


def test_the_python_style_splits_and_other_styles_do_not() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "héllo"}]}
    parts = blocks.split(json.dumps(body))
    assert parts is not None and parts.style == "python"
    # a float the json module writes differently from orjson: the json module's compact style
    tiny = {**body, "temperature": 2.5e-7}
    compact = json.dumps(tiny, separators=(",", ":"), ensure_ascii=False)
    parts = blocks.split(compact)
    assert parts is not None and parts.style == "compact" and reassembled(parts) == compact
    assert blocks.split(json.dumps(body, indent=1)) is None
    assert blocks.split(json.dumps({"model": "m"})) is None  # nothing to share
    assert blocks.split("[1, 2]") is None
    assert blocks.split("not json") is None


def test_a_moved_cache_breakpoint_keeps_a_message_the_same_block() -> None:
    session = AgentSession()
    first = blocks.split(session.body().decode())
    session.respond(0)
    second = blocks.split(session.body().decode())
    assert first is not None and second is not None
    before, after = first.fields["messages"][0], second.fields["messages"][0]
    assert before.marks and not after.marks  # the breakpoint moved to the newest message
    assert before.block == after.block
    assert second.fields["messages"][-1].marks


def test_a_manifest_assembles_from_packs_and_marks_an_erased_pack() -> None:
    body = {"system": "sys", "messages": [{"role": "user", "content": c} for c in "abc"]}
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    parts = blocks.split(text)
    assert parts is not None
    first = blocks.Located("r1", "sha256:1", 0)
    located = {
        "system": [first],
        "messages": [
            blocks.Located("r1", "sha256:1", 1),
            blocks.Located("r1", "sha256:1", 2),
            blocks.Located("r2", "sha256:2", 0),
        ],
    }
    plan = blocks.read_manifest(blocks.manifest(parts, located))
    assert plan.owners == ["r1", "r2"]
    assert plan.fields["messages"] == [[0, 1, 2], [1, 0, 1]]  # runs, not one entry each
    pack1 = [e.block for e in (parts.fields["system"][0], *parts.fields["messages"][:2])]
    pack2 = [parts.fields["messages"][2].block]
    assert blocks.assemble(plan, [pack1, pack2]) == (text, True)
    partial, complete = blocks.assemble(plan, [None, pack2])
    assert not complete
    assert json.loads(partial) == {
        "system": {"erased": True},
        "messages": [{"erased": True}, {"erased": True}, {"role": "user", "content": "c"}],
    }


# -- through the event store ---------------------------------------------------------------


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[EmbeddedLog]:
    log = EmbeddedLog(tmp_path / "log.sqlite3", partitions=1)
    await log.start()
    await log.ensure_topics(list(LOG_TOPICS))
    try:
        yield log
    finally:
        await log.close()


def store_of(log: EmbeddedLog, tmp_path: Path, body_format: str = "blocks") -> EventStore:
    claims = ClaimCheck(LocalArtifactStore(tmp_path / "objects"), 256 * 1024)
    return EventStore(
        log,
        claims=claims,
        keys=TableKeyRing(log),
        body_format=body_format,  # type: ignore[arg-type]
    )


def agent_turns(turns: int, tags: dict[str, str] | None = None) -> list[InferenceRecorded]:
    session = AgentSession(first_prompt=f"charge my card {CARD} for the plan")
    out = []
    for turn in range(turns):
        request = session.body().decode()
        response = json.dumps(session.respond(turn))
        event = inference(SCENARIO, f"rec-{turn}", utc_now())
        out.append(replace(event, request_json=request, response_json=response, tags=tags or {}))
    return out


async def readable(store: EventStore) -> dict[str, tuple[InferenceRecorded, bool]]:
    out = {}
    async for stored in store.read(INFERENCE):
        assert stored.event is not None, stored.error
        if isinstance(stored.event, InferenceRecorded):
            out[stored.event.event_id] = (stored.event, stored.partly_erased)
    return out


def raw_bytes(tmp_path: Path) -> bytes:
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    return b"".join(p.read_bytes() for p in files)


async def test_a_reader_without_the_artifact_store_reports_a_block_request_unreadable(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    store = store_of(log, tmp_path)
    for event in agent_turns(2):
        await store.append(event)
    bare = EventStore(log, keys=TableKeyRing(log))  # the log and its keys, no artifact store
    found = [s async for s in bare.read(INFERENCE)]
    assert len(found) == 2
    for stored in found:
        assert stored.event is None  # never an exchange whose request reads as absent
        assert stored.error is not None and "artifact store" in stored.error


async def test_a_stream_passes_over_a_gone_claim_checked_answer_and_assembles_the_request(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    objects = LocalArtifactStore(tmp_path / "objects")
    store = EventStore(
        log, claims=ClaimCheck(objects, 1024), keys=TableKeyRing(log), body_format="blocks"
    )
    (event,) = agent_turns(1)
    filler = "".join(uuid.uuid4().hex for _ in range(80))  # over the threshold compressed
    answer = {"content": [{"type": "text", "text": filler}]}
    await store.append(replace(event, response_json=json.dumps(answer)))
    (raw,) = [s.event async for s in store.read(INFERENCE, raw=True)]
    assert isinstance(raw, InferenceRecorded) and raw.response_ref is not None
    objects.object_path(parse_ref(raw.response_ref)).unlink()

    stream = EventStream(store, INFERENCE, undecodable="skip")
    (record,) = [r async for r in stream]
    assert isinstance(record.event, InferenceRecorded) and record.unavailable is not None
    assert record.event.request_json == event.request_json  # assembled from its blocks
    assert record.event.response_json is None
    assert record.event.response_ref == raw.response_ref


async def test_a_session_is_stored_once_and_reads_back_byte_exactly(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    store = store_of(log, tmp_path)
    events = agent_turns(8)
    for event in events:
        await store.append(event)
    sent = sum(len((e.request_json or "").encode()) for e in events)
    stored = sum([len(r.value or b"") async for r in log.read(INFERENCE)])
    objects = sum(p.stat().st_size for p in (tmp_path / "objects").rglob("*") if p.is_file())
    assert stored + objects < sent / 10
    views = await readable(store)
    for event in events:
        view, partly = views[event.event_id]
        assert not partly
        assert view.request_json == event.request_json
        assert view.response_json == event.response_json


async def test_erasing_the_first_record_erases_what_it_introduced_everywhere(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    store = store_of(log, tmp_path)
    events = agent_turns(3)
    for event in events:
        await store.append(event)
    stored = [r async for r in log.read(INFERENCE)]
    sample = SampleJoined(
        event_id="sample-1",
        scenario=SCENARIO,
        occurred_at=utc_now(),
        producer="test",
        report_id="report-1",
        references=[e.event_id for e in events],
        score=1.0,
        feedback_json="null",
        metadata_json="{}",
        release_ids=["rel-a"],
        trajectory_json=json.dumps(
            [
                {"receipt": e.event_id, "request": sealed_copy(e.request_sealed, e.request_ref)}
                for e in (store.decode(r).event for r in stored)
                if isinstance(e, InferenceRecorded)
            ]
        ),
    )
    await store.append(sample)
    opened = [s async for s in store.read(SAMPLES)]
    assert CARD in opened[0].event.trajectory_json  # type: ignore[union-attr]
    assert not opened[0].erased

    await store.erase(SCENARIO, "rec-0", producer="test")

    views = await readable(store)
    for n, event in enumerate(events[1:], start=1):
        view, partly = views[event.event_id]
        assert partly
        body = json.loads(view.request_json or "")
        assert CARD not in (view.request_json or "")
        assert body["system"] == {"erased": True} and body["tools"] == {"erased": True}
        assert body["messages"][0] == {"erased": True}
        assert len(body["messages"]) == 1 + 2 * n
        assert all(m != {"erased": True} for m in body["messages"][1:])  # theirs are intact
    assert views["rec-0"][0].request_json is None
    (after,) = [s async for s in store.read(SAMPLES)]
    assert after.erased and CARD not in after.event.trajectory_json  # type: ignore[union-attr]
    assert CARD.encode() not in raw_bytes(tmp_path)


async def test_blocks_are_shared_only_within_a_session(log: EmbeddedLog, tmp_path: Path) -> None:
    store = store_of(log, tmp_path)
    mine = agent_turns(2, {"session": "a"})
    theirs = [replace(e, event_id=f"other-{e.event_id}") for e in agent_turns(2, {"session": "b"})]
    for event in (*mine, *theirs):
        await store.append(event)
    await store.erase(SCENARIO, "rec-0", producer="test")
    views = await readable(store)
    assert views["rec-1"][1]  # same session: repeats what rec-0 introduced
    for event in theirs:
        view, partly = views[event.event_id]
        assert not partly and view.request_json == event.request_json


class FailingOnce:
    """An embedded log whose next append fails (the log went down meanwhile)."""

    def __init__(self, log: EmbeddedLog) -> None:
        self.log = log
        self.fail = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.log, name)

    async def append_many(self, records: Sequence[PendingAppend]) -> list[Position]:
        if self.fail:
            self.fail = False
            raise LogUnavailableError("down")
        return await self.log.append_many(records)


async def test_a_record_never_references_blocks_of_a_failed_append(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    failing = FailingOnce(log)
    claims = ClaimCheck(LocalArtifactStore(tmp_path / "objects"), 256 * 1024)
    store = EventStore(
        failing,  # type: ignore[arg-type]
        claims=claims,
        keys=TableKeyRing(log),
        body_format="blocks",
    )
    first, second = agent_turns(2)
    failing.fail = True
    with pytest.raises(LogUnavailableError):
        await store.append(first)
    await store.append(second)  # introduces everything again: nothing of `first` is durable
    views = await readable(store)
    assert list(views) == ["rec-1"]
    view, partly = views["rec-1"]
    assert not partly and view.request_json == second.request_json


async def test_the_previous_formats_stay_readable_beside_blocks(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    events = agent_turns(3)
    for event, body_format in zip(events, ("plain", "compressed", "blocks"), strict=True):
        await store_of(log, tmp_path, body_format).append(event)
    views = await readable(store_of(log, tmp_path))
    assert [v.request_json for v, _ in views.values()] == [e.request_json for e in events]


async def test_erasing_a_record_erases_its_answer_where_the_agent_resends_it(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    store = store_of(log, tmp_path)
    events = [replace(e, route="/v1/messages", dialect="anthropic") for e in agent_turns(3)]
    for event in events:
        await store.append(event)
    await store.erase(SCENARIO, "rec-1", producer="test")
    views = await readable(store)
    last = json.loads(views["rec-2"][0].request_json or "")
    sent = json.loads(events[2].request_json or "")
    # rec-1 introduced the tool result of turn 0 (messages[2]) and answered messages[3]
    assert last["messages"][2] == {"erased": True} and last["messages"][3] == {"erased": True}
    assert last["messages"][:2] == sent["messages"][:2]  # rec-0's prompt and answer
    assert last["messages"][4:] == sent["messages"][4:]
    assert views["rec-2"][1]


def test_the_answer_blocks_of_each_dialect() -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}
    anthropic = json.dumps({"id": "m", "content": message["content"], "role": "assistant"})
    chat = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]})
    output = [{"type": "message", "content": []}, {"type": "function_call", "name": "f"}]
    responses = json.dumps({"output": output})
    assert [e.block for e in blocks.answer("/v1/messages", anthropic)] == [
        blocks.canonical(message)
    ]
    assert [e.block for e in blocks.answer("/v1/chat/completions", chat)] == [
        blocks.canonical({"role": "assistant", "content": "x"})
    ]
    assert [e.block for e in blocks.answer("/v1/responses", responses)] == [
        blocks.canonical(item) for item in output
    ]
    assert blocks.answer("/v1/messages", "not json") == []
    assert blocks.answer("/v1/messages/count_tokens", '{"input_tokens": 3}') == []


class DownStore(LocalArtifactStore):
    """An artifact store that cannot write (S3 unreachable)."""

    def put_bytes(self, data: bytes) -> ObjectRef:
        raise ArtifactError("store down")


async def test_a_store_that_cannot_take_the_blocks_records_nothing(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    claims = ClaimCheck(DownStore(tmp_path / "objects"), 256 * 1024)
    store = EventStore(log, claims=claims, keys=TableKeyRing(log), body_format="blocks")
    (event,) = agent_turns(1)
    with pytest.raises(LogUnavailableError, match="blocks"):
        await store.append(event)
    assert [r async for r in log.read(INFERENCE)] == []


def test_the_index_forgets_an_erased_records_blocks_in_every_scope() -> None:
    index = BlockIndex(max_scopes=2)
    one, two = blocks.Located("r1", "sha256:1", 0), blocks.Located("r2", "sha256:2", 0)
    index.add(Staged(("s", "a"), {b"x": one, b"y": two}))
    index.add(Staged(("s", "b"), {b"x": one}))
    index.forget("r1")
    assert dict(index.get(("s", "a"))) == {b"y": two} and dict(index.get(("s", "b"))) == {}
    index.add(Staged(("s", "c"), {b"z": two}))  # the least recently used scope goes
    assert dict(index.get(("s", "a"))) == {} and dict(index.get(("s", "c"))) == {b"z": two}
    index.forget("r2")
    assert dict(index.get(("s", "c"))) == {}


async def test_a_prepared_request_is_sealed_from_what_was_stored_while_it_waited(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    store = store_of(log, tmp_path)
    events = [replace(e, route="/v1/messages", dialect="anthropic") for e in agent_turns(4)]
    for event in events:
        assert event.request_json is not None
        raw = event.request_json.encode()  # as the API holds it: bytes and parsed object
        store.prepare_request(
            SCENARIO,
            event.event_id,
            event.tags,
            event.request_json,
            raw=raw,
            parsed=json.loads(raw),
        )
        assert store.bodies is not None
        await asyncio.wait([store.bodies._prepared[event.event_id]])  # the upstream answers
        objects = {p for p in (tmp_path / "objects").rglob("*") if p.is_file()}
        await store.append(event)
        # the request's pack was stored while it waited: the append stores none
        assert {p for p in (tmp_path / "objects").rglob("*") if p.is_file()} == objects
    views = await readable(store)
    assert [v.request_json for v, _ in views.values()] == [e.request_json for e in events]
    await store.erase(SCENARIO, "rec-1", producer="test")
    views = await readable(store)
    last = json.loads(views["rec-3"][0].request_json or "")
    # rec-1's tool result, and its answer (stored by the next request that repeated it)
    assert last["messages"][2] == {"erased": True} and last["messages"][3] == {"erased": True}
    assert last["messages"][4] != {"erased": True}


async def test_a_prepared_request_that_changed_is_sealed_as_it_is(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    store = store_of(log, tmp_path)
    (event,) = agent_turns(1)
    store.prepare_request(SCENARIO, event.event_id, event.tags, '{"messages": []}')
    await store.append(event)
    views = await readable(store)
    assert views[event.event_id][0].request_json == event.request_json
