"""A Kafka task's partition buffer (streams/partition_buffer.py), without a broker: what
the kernel's horizon lets through, in its order, in batches of at most ``most``; what an
input fetched again resumes from; which inputs hold too much, and their pauses."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from reef.core import topics
from reef.core.kernel import OrderKey, TopicOrder, ready
from streams.partition_buffer import InputPauses, PartitionBuffer
from streams.records import TopicPartition

ORDER = TopicOrder("t.")
INFERENCE, REPORTS = "t." + topics.INFERENCE, "t." + topics.REPORTS


@dataclass(frozen=True)
class Message:
    topic: str
    partition: int
    offset: int
    timestamp: int


def key(m: Message) -> OrderKey:
    return ORDER.key(m.topic, m.timestamp, m.offset)


def buffer() -> PartitionBuffer[str, Message]:
    return PartitionBuffer([INFERENCE, REPORTS], lambda m: m.topic, key)


def messages(topic: str, times: list[int]) -> list[Message]:
    return [Message(topic, 0, offset, t) for offset, t in enumerate(times)]


def test_with_nothing_open_everything_held_comes_out_in_the_kernels_order() -> None:
    held = buffer()
    held.hold(INFERENCE, messages(INFERENCE, [1, 2, 2]))
    held.hold(REPORTS, messages(REPORTS, [2, 3]))
    taken = held.take(set(), most=100)
    assert [(m.topic, m.timestamp) for m in taken] == [
        (INFERENCE, 1),
        (INFERENCE, 2),
        (INFERENCE, 2),
        (REPORTS, 2),  # a tie in time: the exchanges' topic ranks first
        (REPORTS, 3),
    ]
    assert not held.holds(INFERENCE) and not held.holds(REPORTS)


def test_an_open_input_bounds_the_batch_by_its_last_held_record() -> None:
    held = buffer()
    held.hold(INFERENCE, messages(INFERENCE, [5]))
    held.hold(REPORTS, messages(REPORTS, [1, 4, 6, 9]))
    # the exchanges' topic may have more after time 5: reports after it wait
    assert [m.timestamp for m in held.take({INFERENCE}, most=100)] == [1, 4, 5]
    assert held.holds(REPORTS) and held.resume_offset(REPORTS, 0) == 4
    assert held.resume_offset(INFERENCE, 1) == 1  # nothing held: from the committed offset


def test_an_open_input_with_nothing_held_holds_everything_back() -> None:
    held = buffer()
    held.hold(REPORTS, messages(REPORTS, [1, 2]))
    assert held.take({INFERENCE}, most=100) == []
    assert held.full(2) == {REPORTS} and held.full(3) == set()


@settings(max_examples=200, deadline=None)
@given(
    times=st.tuples(*(st.lists(st.integers(0, 2), max_size=25) for _ in range(2))),
    plan=st.lists(st.tuples(st.booleans(), st.integers(1, 6), st.integers(1, 5))),
)
def test_batches_of_any_size_come_out_in_the_order_of_everything_at_once(
    times: tuple[list[int], list[int]], plan: list[tuple[bool, int, int]]
) -> None:
    inputs = {
        INFERENCE: messages(INFERENCE, _rising(times[0])),
        REPORTS: messages(REPORTS, _rising(times[1])),
    }
    everything = ready(inputs.values(), key, None)
    held, fetched, out = buffer(), {INFERENCE: 0, REPORTS: 0}, []
    steps = [(INFERENCE if first else REPORTS, count, most) for first, count, most in plan]
    steps += [(INFERENCE, 100, 1000), (REPORTS, 100, 1000)]
    for topic, count, most in steps:
        new = inputs[topic][fetched[topic] : fetched[topic] + count]
        held.hold(topic, new)
        fetched[topic] += len(new)
        open_inputs = {t for t in inputs if fetched[t] < len(inputs[t])}
        out += held.take(open_inputs, most)
    out += held.take(set(), 1000)
    assert out == everything


def _rising(gaps: list[int]) -> list[int]:
    total, out = 0, []
    for gap in gaps:
        total += gap
        out.append(total)
    return out


class Pauses:
    """The pause and resume calls a consumer received, and what is paused."""

    def __init__(self) -> None:
        self.paused: set[TopicPartition] = set()
        self.calls: list[tuple[str, set[TopicPartition]]] = []

    def pause(self, *tps: TopicPartition) -> None:
        self.calls.append(("pause", set(tps)))
        self.paused |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.calls.append(("resume", set(tps)))
        self.paused -= set(tps)


def test_exactly_the_full_inputs_are_paused_and_released_ones_resumed() -> None:
    a, b, c = (TopicPartition(INFERENCE, n) for n in range(3))
    consumer = Pauses()
    pauses = InputPauses(consumer)
    pauses.hold_back({a, b})
    pauses.hold_back({b, c})
    assert consumer.paused == {b, c} and a not in pauses and c in pauses
    pauses.hold_back({b, c})  # nothing changed: no call
    assert consumer.calls == [("pause", {a, b}), ("pause", {c}), ("resume", {a})]
    pauses.release()
    assert consumer.paused == set() and b not in pauses
    pauses.release()  # nothing paused: no call
    assert consumer.calls[-1] == ("resume", {b, c})
