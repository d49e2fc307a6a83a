"""Erasure through the pure join and the trainer (embedded log, real key table).

* The join carries sealed bodies verbatim (no key), forgets an erased record and
  rejects a later report on it as ``erased``; replaying the same events gives the same
  state (its decisions do not depend on which keys exist).
* The trainer skips a sample whose record was erased, and trains on the others; the
  same for a sample whose judge's hint quotes an erased record (the next turn's).
"""

from __future__ import annotations

import json
from typing import Any

from reef.core.events import (
    Event,
    InferenceRecorded,
    RecordErased,
    ReportRejected,
    ReportSubmitted,
    SampleJoined,
    TurnJudged,
    utc_now,
)
from reef.core.feedback import FeedbackProcessor
from reef.core.ids import derived_id, new_receipt, new_record_id
from reef.core.join import JoinProcessor
from reef.core.state import DictState
from reef.core.topics import INFERENCE, JUDGEMENTS, LOG_TOPICS, SAMPLES
from reef.crypto import new_data_key
from reef.crypto.bodies import seal_exchange
from reef.crypto.rings import TableKeyRing
from reef.services.eventstore import EventStore
from tests.support.trainer_harness import Harness, until

SCENARIO = "s"


def exchange(text: str, scenario: str = SCENARIO) -> InferenceRecorded:
    return InferenceRecorded(
        event_id=new_receipt(scenario),
        scenario=scenario,
        occurred_at=utc_now(),
        producer="test",
        dialect="openai",
        route="/v1/chat/completions",
        release_id="r0",
        stream=False,
        status=200,
        complete=True,
        latency_ms=1.0,
        upstream_latency_ms=1.0,
        request_json=json.dumps({"messages": [{"role": "user", "content": text}]}),
        response_json=json.dumps({"choices": [{"message": {"content": f"re {text}"}}]}),
    )


def reported(*refs: str, scenario: str = SCENARIO) -> ReportSubmitted:
    return ReportSubmitted(
        event_id=new_record_id(),
        scenario=scenario,
        occurred_at=utc_now(),
        producer="test",
        score=1.0,
        feedback_json='{"correction": "hi"}',
        references=list(refs),
        metadata_json="{}",
        content_hash=new_record_id(),
    )


def erased(record_id: str, scenario: str = SCENARIO) -> RecordErased:
    return RecordErased(
        event_id=derived_id("erased", scenario, record_id),
        scenario=scenario,
        occurred_at=utc_now(),
        producer="test",
        record_id=record_id,
    )


def test_join_keeps_sealed_copies_and_rejects_reports_on_erased_records() -> None:
    secret = "secret-" + new_record_id()
    first = seal_exchange(exchange(secret), new_data_key())
    second = seal_exchange(exchange("other"), new_data_key())
    events: list[Event] = [first, second, reported(first.event_id, second.event_id)]
    events += [erased(first.event_id), reported(first.event_id), reported(second.event_id)]
    join, state = JoinProcessor(), DictState()
    outputs = [out for event in events for out in join.step(state, event)]
    sample, late, consumed = outputs
    assert isinstance(sample, SampleJoined)
    assert sample.references == [first.event_id, second.event_id]
    trajectory = json.loads(sample.trajectory_json)
    assert {"sealed"} == set(trajectory[0]["request"]) and secret not in sample.trajectory_json
    assert isinstance(late, ReportRejected) and late.reason == "erased"
    assert isinstance(consumed, ReportRejected) and consumed.reason == "already_consumed"
    assert state.get(f"rec/{first.event_id}") is None
    assert state.get(f"erased/{first.event_id}") is True
    assert secret not in json.dumps(state.data)
    # a redelivered record after its erasure stays forgotten
    assert join.step(state, first) == [] and state.get(f"rec/{first.event_id}") is None
    replayed = DictState()
    assert [o for e in events for o in JoinProcessor().step(replayed, e)] == outputs
    assert replayed.data == state.data


async def test_trainer_skips_a_sample_whose_record_was_erased(
    harness: Harness,
    running: Any,
) -> None:
    await harness.log.ensure_topics(list(LOG_TOPICS))
    sealing = EventStore(harness.log, keys=TableKeyRing(harness.log))
    r0 = await harness.create(SCENARIO)
    kept, gone = exchange("kept"), exchange("gone")
    await sealing.append_all([kept, gone])
    join, state = JoinProcessor(), DictState()
    samples: dict[str, SampleJoined] = {}
    async for stored in sealing.read(INFERENCE, raw=True):  # as stored: sealed
        assert stored.event is not None
        report = reported(stored.event.event_id)
        for out in join.step(state, stored.event) + join.step(state, report):
            assert isinstance(out, SampleJoined)
            samples[out.references[0]] = out
    assert set(samples) == {kept.event_id, gone.event_id}
    await sealing.erase(SCENARIO, gone.event_id, producer="test")
    for sample in samples.values():
        await harness.store.append(
            SampleJoined(
                **{**_fields(sample), "release_ids": [r0]},
            )
        )
    trainer = harness.trainer({"batching": {"batch_size": 1}}, store=sealing)
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
        await until(lambda: trainer.status()["samples_skipped"].get("erased") == 1)
    (release,) = await harness.committed()
    assert release.sample_ids == [samples[kept.event_id].event_id]
    samples_stored = [s async for s in sealing.read(SAMPLES)]
    by_id = {s.event.event_id: s for s in samples_stored if isinstance(s.event, SampleJoined)}
    assert by_id[samples[gone.event_id].event_id].erased
    kept_sample = by_id[samples[kept.event_id].event_id].event
    assert isinstance(kept_sample, SampleJoined) and "re kept" in kept_sample.trajectory_json


def hinted(judged: InferenceRecorded, following: InferenceRecorded) -> TurnJudged:
    """A -1 judgement of ``judged`` whose hint quotes ``following``'s request."""
    return TurnJudged(
        event_id=derived_id("judged", judged.event_id),
        scenario=SCENARIO,
        occurred_at=utc_now(),
        producer="test",
        turn_id=derived_id("turn", judged.event_id),
        session_id=judged.event_id,
        turn_index=0,
        receipt_id=judged.event_id,
        next_receipt_id=following.event_id,
        release_id="r0",
        judge_model="j",
        score=-1,
        votes=[-1],
        hints=[f"The user said: {following.request_json}"],
    )


async def test_trainer_skips_a_sample_whose_hint_quotes_an_erased_record(
    harness: Harness,
    running: Any,
) -> None:
    await harness.log.ensure_topics(list(LOG_TOPICS))
    sealing = EventStore(harness.log, keys=TableKeyRing(harness.log))
    r0 = await harness.create(SCENARIO)
    turns = [(exchange("asked a"), exchange("no, a")), (exchange("asked b"), exchange("no, b"))]
    await sealing.append_all([e for turn in turns for e in turn])
    await sealing.append_all([hinted(*turn) for turn in turns])  # the hints sealed
    join, state, feedback = JoinProcessor(), DictState(), FeedbackProcessor()
    samples: dict[str, SampleJoined] = {}
    async for stored in sealing.read(INFERENCE, raw=True):
        assert stored.event is not None and join.step(state, stored.event) == []
    async for stored in sealing.read(JUDGEMENTS, raw=True):  # as stored: sealed
        assert isinstance(stored.event, TurnJudged) and stored.event.hints == []
        for report in feedback.step(state, stored.event):
            (out,) = join.step(state, report)
            assert isinstance(out, SampleJoined)
            samples[out.references[0]] = out
    (kept, _), (gone, next_gone) = turns
    await sealing.erase(SCENARIO, next_gone.event_id, producer="test")  # the user's reply
    for sample in samples.values():
        await harness.store.append(SampleJoined(**{**_fields(sample), "release_ids": [r0]}))
    trainer = harness.trainer({"batching": {"batch_size": 1}}, store=sealing)
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
        await until(lambda: trainer.status()["samples_skipped"].get("erased") == 1)
    (release,) = await harness.committed()
    assert release.sample_ids == [samples[kept.event_id].event_id]
    by_id = {s.event.event_id: s async for s in sealing.read(SAMPLES) if s.event is not None}
    assert by_id[samples[gone.event_id].event_id].erased
    kept_sample = by_id[samples[kept.event_id].event_id].event
    assert isinstance(kept_sample, SampleJoined) and "no, a" in kept_sample.feedback_json


def _fields(sample: SampleJoined) -> dict[str, Any]:
    return {name: getattr(sample, name) for name in sample.__dataclass_fields__}
