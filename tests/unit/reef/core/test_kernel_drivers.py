"""The Kafka host and replay, driven by one kernel, fold a workload alike: for random
join workloads on one partition number (exchanges and reports on two topics, ties in
append time, reports before or after the exchange they quote), the Kafka host's batch
computation (batch protocol step 1 over real RocksDB stores; records fed as its consumer
hands them, in random fetch pieces, through a task's partition buffer; each batch's changes
committed before the next) produces the same outputs, in the same order, and the same
state as replay's fold of everything at once, for the join and for a processor whose
state is the order it was fed. (The embedded host against replay, over
one embedded log: tests/unit/reef/log/test_embedded_snapshot.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from hypothesis import given, settings
from hypothesis import strategies as st

from reef.codec import EventCodec
from reef.core import topics
from reef.core.events import Event
from reef.core.join import JoinProcessor
from reef.core.kernel import TopicOrder, fold, ready, record_key
from reef.core.state import DictState, KeyValueState, Processor
from reef_dev.events import inference, receipt, report
from streams.batch import BatchRunner
from streams.records import FetchedRecord, TopicPartition
from streams.store import PartitionStore
from streams.task import hosted_processors, task_buffer

SCENARIO = "drivers-s"
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CODEC = EventCodec()


@dataclass(frozen=True)
class Message:
    """A record of the workload: where it is, when it was appended, its event."""

    topic: str
    offset: int
    timestamp_ms: int
    value: bytes
    event: Event

    def fetched(self) -> FetchedRecord:
        """The record as the host's consumer hands it."""
        return FetchedRecord(self.topic, 0, self.offset, self.timestamp_ms, None, self.value)


def workload(steps: list[tuple[bool, int, int]]) -> dict[str, list[Message]]:
    """Per topic, its records in offset order: each step an exchange (True) or a report
    quoting receipt ``ref`` (which may come later, or never), ``gap`` ms after the last."""
    out: dict[str, list[Message]] = {topics.INFERENCE: [], topics.REPORTS: []}
    time = 1_000
    for i, (is_exchange, ref, gap) in enumerate(steps):
        time += gap
        if is_exchange:
            event: Event = inference(SCENARIO, receipt(SCENARIO, i), AT)
        else:
            event = report(SCENARIO, f"report-{i}", [receipt(SCENARIO, ref)], AT)
        topic = topics.topic_for(event.type_name())
        value, _ = CODEC.encode(event)
        records = out[topic]
        records.append(Message(topic, len(records), time, value, event))
    return out


class SeenOrder:
    """A processor whose state is the order it was fed (the join's is robust to much of
    it by design: a report before its exchange is parked, then joined)."""

    name = "seen"
    inputs = (topics.INFERENCE, topics.REPORTS)
    output = topics.SAMPLES

    def step(self, state: KeyValueState, event: Event) -> list[Event]:
        state.set("order", [*(state.get("order") or []), event.event_id])
        return []


def replayed(inputs: dict[str, list[Message]]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    merged = [m.event for m in ready(inputs.values(), record_key, None)]
    join, seen = DictState(), DictState()
    outputs = fold(JoinProcessor(), join, merged)
    fold(SeenOrder(), seen, merged)
    return [e.event_id for e in outputs], {"join": join.data, "seen": seen.data}


def unreachable(reason: str, exc: BaseException | None) -> NoReturn:
    raise AssertionError(f"the batch ended the worker: {reason}") from exc


async def hosted(
    inputs: dict[str, list[Message]], pieces: Sequence[tuple[bool, int, int]], data: Path
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    processors: list[Processor] = [JoinProcessor(), SeenOrder()]
    runner = BatchRunner(
        hosted_processors(processors, "", "reef-streams"),
        CODEC,
        topic_prefix="",
        fatal=unreachable,
    )
    stores = {p.name: PartitionStore(data / f"{p.name}-0") for p in processors}
    buffer = task_buffer([TopicPartition(topic, 0) for topic in inputs], TopicOrder())
    outputs: list[str] = []
    state: dict[str, dict[str, Any]] = {name: {} for name in stores}
    fetched = dict.fromkeys(inputs, 0)
    names = list(inputs)
    plan = [(names[int(first)], count, most) for first, count, most in pieces]
    plan += [(name, 10**6, 10**6) for name in names]
    try:
        for topic, count, most in plan:
            new = inputs[topic][fetched[topic] : fetched[topic] + count]
            buffer.hold(TopicPartition(topic, 0), [m.fetched() for m in new])
            fetched[topic] += len(new)
            open_inputs = {TopicPartition(t, 0) for t in names if fetched[t] < len(inputs[t])}
            batch = buffer.take(open_inputs, most)
            if not batch:
                continue
            pending = await runner.compute(stores, batch)
            outputs += [CODEC.decode(value).event_id for _, _, value, _ in pending.outputs]
            for name, store in stores.items():
                store.commit(pending.changes[name])  # as after the transaction's commit
                for change in pending.changes[name]:
                    if change.value is None:
                        state[name].pop(change.key, None)
                    else:
                        state[name][change.key] = change.value
    finally:
        for store in stores.values():
            store.close()
    return outputs, state


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.booleans(), st.integers(0, 12), st.integers(0, 2)), min_size=1, max_size=14
    ),
    pieces=st.lists(st.tuples(st.booleans(), st.integers(1, 4), st.integers(1, 5)), max_size=10),
)
def test_the_kafka_host_folds_a_workload_as_replay_does(
    tmp_path_factory: Any,
    steps: list[tuple[bool, int, int]],
    pieces: list[tuple[bool, int, int]],
) -> None:
    inputs = workload(steps)
    data = tmp_path_factory.mktemp("drivers")
    outputs, state = asyncio.run(hosted(inputs, pieces, data))
    assert (outputs, state) == replayed(inputs)
