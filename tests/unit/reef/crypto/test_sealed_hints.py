"""A judgement's hints are sealed like bodies: under the keys of the judged record and of
the next one (whose request holds the user's reply the hint quotes), on a real embedded
log with its key table. The report computed from the judgement and the sample joined
from that report carry the sealed copy; erasing either record shreds the hints in all
three, and a sample whose hints are gone reads as erased (the trainer skips it).
Judgements written with hints in clear still read as before."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from recipes.openclaw_rl.turns import hint_of
from recipes.samples import sample_from_event
from reef.core import topics
from reef.core.events import (
    Event,
    ReportSubmitted,
    SampleJoined,
    TurnCompleted,
    TurnJudged,
)
from reef.core.feedback import FeedbackProcessor
from reef.core.join import JoinProcessor
from reef.core.sealed import is_sealed_hints
from reef.core.state import DictState
from reef.crypto import SealError, new_data_key
from reef.crypto.hints import open_feedback, open_hints, seal_hints
from reef.services.eventstore import EventStore, StoredEvent
from tests.support.judging import judged_store, session

AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SCENARIO = "hinted"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    async with judged_store(tmp_path) as opened:
        yield opened


def judgement(turn: TurnCompleted, hints: list[str]) -> TurnJudged:
    return TurnJudged(
        event_id=f"judged-{turn.event_id}",
        scenario=turn.scenario,
        occurred_at=AT,
        producer="test",
        turn_id=turn.event_id,
        session_id=turn.session_id,
        turn_index=turn.turn_index,
        receipt_id=turn.receipt_id,
        next_receipt_id=turn.next_receipt_id,
        release_id=turn.release_id,
        judge_model="j",
        score=-1,
        votes=[-1, -1],
        hints=hints,
        next_state_role="user",
    )


async def judged_turn(store: EventStore, reply: str) -> TurnCompleted:
    """A recorded (sealed) turn whose next state is ``reply``, and its hinted judgement."""
    exchanges, turn = session(SCENARIO, 0, reply, AT)
    await store.append_all(exchanges)
    await store.append(judgement(turn, [f"The user said: {reply}"]))
    return turn


async def raw(store: EventStore, topic: str) -> list[Event]:
    return [s.event async for s in store.read(topic, raw=True) if s.event is not None]


async def opened(store: EventStore, topic: str) -> list[StoredEvent]:
    return [s async for s in store.read(topic)]


async def raw_bytes(store: EventStore) -> bytes:
    chunks = []
    for topic in topics.LOG_TOPICS:
        chunks += [r.value async for r in store.log.read(topic)]
    return b"\n".join(chunks)


async def derive_report_and_sample(store: EventStore) -> tuple[ReportSubmitted, SampleJoined]:
    """What the feedback processor and the join make of the stored (sealed) events."""
    (judged,) = [e for e in await raw(store, topics.JUDGEMENTS) if isinstance(e, TurnJudged)]
    (report,) = FeedbackProcessor().step(DictState(), judged)
    assert isinstance(report, ReportSubmitted)
    join, state = JoinProcessor(), DictState()
    outputs = [o for e in await raw(store, topics.INFERENCE) for o in join.step(state, e)]
    outputs += join.step(state, report)
    (sample,) = outputs
    assert isinstance(sample, SampleJoined)
    await store.append_all([report, sample])
    return report, sample


def reply_marker() -> str:
    return f"no, it is {uuid.uuid4().hex}"


# -- the pure sealing ------------------------------------------------------------------------


def test_sealed_hints_open_only_with_both_keys_in_their_place() -> None:
    outer, inner = new_data_key(), new_data_key()
    keys = [("rec-1", outer), ("rec-2", inner)]
    blob = seal_hints(["The user said: secret-reply"], "s", keys)
    assert b"secret-reply" not in blob
    assert open_hints(blob, "s", keys) == ["The user said: secret-reply"]
    for wrong in (
        [("rec-1", outer)],  # one layer only
        [("rec-2", inner), ("rec-1", outer)],  # the layers swapped
        [("rec-1", outer), ("rec-2", new_data_key())],  # a key that is not the record's
        [("rec-1", outer), ("rec-3", inner)],  # another record
    ):
        with pytest.raises(SealError):
            open_hints(blob, "s", wrong)
    with pytest.raises(SealError):
        open_hints(blob, "other", keys)


def test_feedback_without_sealed_hints_is_left_as_it_is() -> None:
    for feedback in ('{"correction": "hi"}', '"good"', "null", '["a hint in clear"]'):
        assert open_feedback(feedback, "s", {}) == (feedback, True)
    spoof = json.dumps({"sealed_hints": "AAAA", "receipts": []})  # no record: not a copy
    assert open_feedback(spoof, "s", {}) == (spoof, True)


# -- through the event store -----------------------------------------------------------------


async def test_a_judgement_is_appended_with_its_hints_sealed_and_read_back_opened(
    store: EventStore,
) -> None:
    reply = reply_marker()
    turn = await judged_turn(store, reply)
    assert reply.encode() not in await raw_bytes(store)
    (stored,) = await raw(store, topics.JUDGEMENTS)
    assert isinstance(stored, TurnJudged)
    assert stored.hints == [] and stored.hints_sealed is not None
    (read,) = await opened(store, topics.JUDGEMENTS)
    assert isinstance(read.event, TurnJudged) and not read.erased
    assert read.event.hints == [f"The user said: {reply}"] and read.event.hints_sealed is None
    assert read.event.receipt_id == turn.receipt_id


async def test_the_report_and_sample_carry_the_sealed_copy_and_the_trainer_reads_the_hint(
    store: EventStore,
) -> None:
    reply = reply_marker()
    turn = await judged_turn(store, reply)
    report, sample = await derive_report_and_sample(store)
    copy = json.loads(report.feedback_json)
    assert is_sealed_hints(copy) and copy["receipts"] == [turn.receipt_id, turn.next_receipt_id]
    assert sample.feedback_json == report.feedback_json  # the join copies it verbatim
    assert reply.encode() not in await raw_bytes(store)

    (read_report,) = await opened(store, topics.REPORTS)
    assert isinstance(read_report.event, ReportSubmitted) and not read_report.erased
    assert json.loads(read_report.event.feedback_json) == [f"The user said: {reply}"]
    (read_sample,) = await opened(store, topics.SAMPLES)
    assert isinstance(read_sample.event, SampleJoined) and not read_sample.erased
    trained = sample_from_event(read_sample.event)
    assert hint_of(trained.feedback) == f"The user said: {reply}"


@pytest.mark.parametrize("which", ["judged", "next"])
async def test_erasing_either_record_shreds_the_hints_everywhere(
    store: EventStore, which: str
) -> None:
    reply = reply_marker()
    turn = await judged_turn(store, reply)
    await derive_report_and_sample(store)
    record = turn.receipt_id if which == "judged" else turn.next_receipt_id
    await store.erase(SCENARIO, record, producer="test")

    (judged,) = await opened(store, topics.JUDGEMENTS)
    assert isinstance(judged.event, TurnJudged) and judged.erased
    assert judged.event.hints == [] and judged.event.hints_sealed is None
    assert judged.event.score == -1  # the decision stays: only the quote is gone
    (report,) = await opened(store, topics.REPORTS)
    assert isinstance(report.event, ReportSubmitted) and report.erased
    assert report.event.feedback_json == "null"
    (sample,) = await opened(store, topics.SAMPLES)
    assert isinstance(sample.event, SampleJoined) and sample.erased  # the trainer skips it
    assert sample.event.feedback_json == "null"
    for stored in (judged, report, sample):
        assert stored.event is not None and reply not in repr(stored.event)
    assert reply.encode() not in await raw_bytes(store)


async def test_a_judgement_appended_after_its_record_was_erased_keeps_no_hint(
    store: EventStore,
) -> None:
    reply = reply_marker()
    exchanges, turn = session(SCENARIO, 0, reply, AT)
    await store.append_all(exchanges)
    await store.erase(SCENARIO, turn.next_receipt_id, producer="test")
    await store.append(judgement(turn, [f"The user said: {reply}"]))
    (stored,) = await raw(store, topics.JUDGEMENTS)
    assert isinstance(stored, TurnJudged)
    assert (stored.hints, stored.hints_sealed) == ([], None)
    assert reply.encode() not in await raw_bytes(store)


async def test_exchanges_and_judgement_appended_together_seal_with_the_fresh_keys(
    store: EventStore,
) -> None:
    reply = reply_marker()
    exchanges, turn = session(SCENARIO, 0, reply, AT)
    await store.append_all([*exchanges, judgement(turn, [f"The user said: {reply}"])])
    (read,) = await opened(store, topics.JUDGEMENTS)
    assert isinstance(read.event, TurnJudged) and read.event.hints == [f"The user said: {reply}"]
    assert reply.encode() not in await raw_bytes(store)


async def test_judgements_written_with_hints_in_clear_read_as_before(store: EventStore) -> None:
    exchanges, turn = session(SCENARIO, 0, "no, four", AT)
    clear = EventStore(store.log)  # a writer without a key ring: nothing is sealed
    await clear.append_all([*exchanges, judgement(turn, ["The user said: no, four"])])
    (judged,) = await opened(store, topics.JUDGEMENTS)
    assert isinstance(judged.event, TurnJudged) and not judged.erased
    assert judged.event.hints == ["The user said: no, four"]
    (report,) = FeedbackProcessor().step(DictState(), judged.event)
    assert isinstance(report, ReportSubmitted)
    assert json.loads(report.feedback_json) == ["The user said: no, four"]
    await store.append(report)
    (read,) = await opened(store, topics.REPORTS)
    assert isinstance(read.event, ReportSubmitted) and not read.erased
    assert read.event.feedback_json == report.feedback_json


def test_the_feedback_processor_copies_sealed_hints_verbatim() -> None:
    _, turn = session(SCENARIO, 0, "no,", AT)
    sealed = replace(judgement(turn, []), hints_sealed=b"\x01sealed-blob")
    first = FeedbackProcessor().step(DictState(), sealed)
    again = FeedbackProcessor().step(DictState(), sealed)
    assert first == again  # pure: replay gives the same report (same content hash)
    (report,) = first
    assert isinstance(report, ReportSubmitted)
    copy: Any = json.loads(report.feedback_json)
    assert is_sealed_hints(copy)
    assert copy["receipts"] == [turn.receipt_id, turn.next_receipt_id]
