"""The processing kernel (reef.core.kernel): one order and one horizon rule for both
hosts and replay.

* Folding batch after batch, each up to its horizon, whatever pieces the inputs are read
  in (the Kafka host's fetches, the embedded host's snapshot shares), gives exactly the
  order of folding everything at once (replay), ties in time included.
* The rank is one domain, the log's topic list, for every processor: each processor of
  the catalogue lists its inputs in that order, so ranking a processor's inputs by their
  place in its own list gives the kernel's order too (a log folded either way replays
  the same).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from reef.catalog import processors
from reef.core import topics
from reef.core.events import Event
from reef.core.kernel import (
    BEFORE_ALL,
    OrderKey,
    TopicOrder,
    fold,
    horizon,
    order_key,
    ready,
    record_key,
)
from reef.core.state import DictState, KeyValueState
from reef.settings import Settings
from reef_dev.events import inference, receipt
from tests.support.embedded_join import at

INPUTS = (topics.INFERENCE, topics.REPORTS, topics.SAMPLES)


@dataclass(frozen=True)
class Rec:
    topic: str
    timestamp_ms: int
    offset: int


def workloads() -> st.SearchStrategy[dict[str, list[Rec]]]:
    """Up to three inputs of one partition number; append times rise by 0-2 ms per
    record, so many records of different inputs share a time."""

    def build(steps: list[list[int]]) -> dict[str, list[Rec]]:
        out = {}
        for topic, gaps in zip(INPUTS, steps, strict=False):
            time, records = 0, []
            for offset, gap in enumerate(gaps):
                time += gap
                records.append(Rec(topic, time, offset))
            out[topic] = records
        return out

    gaps = st.lists(st.integers(0, 2), max_size=30)
    return st.lists(gaps, min_size=1, max_size=3).map(build)


@settings(max_examples=300, deadline=None)
@given(workload=workloads(), fetches=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 7))))
def test_batches_up_to_their_horizons_fold_in_the_order_of_everything_at_once(
    workload: dict[str, list[Rec]], fetches: list[tuple[int, int]]
) -> None:
    everything = ready(workload.values(), record_key, None)
    names = list(workload)
    fetched = dict.fromkeys(names, 0)
    held: dict[str, deque[Rec]] = {name: deque() for name in names}
    folded: list[Rec] = []
    # the drawn fetches, then whole inputs until everything is read and folded
    plan = [(names[i % len(names)], n) for i, n in fetches] + [(n, 10**6) for n in names]
    for name, count in plan:
        new = workload[name][fetched[name] : fetched[name] + count]
        held[name].extend(new)
        fetched[name] += len(new)
        open_inputs: list[OrderKey | None] = [
            record_key(held[n][-1]) if held[n] else None
            for n in names
            if fetched[n] < len(workload[n])
        ]
        batch = ready(held.values(), record_key, horizon(open_inputs))
        for record in batch:
            assert held[record.topic].popleft() == record
        folded += batch
    assert folded == everything
    assert sorted(folded, key=record_key) == everything  # one total order, by key


def test_an_open_input_with_nothing_read_holds_everything_back() -> None:
    assert horizon([(5, 1, 0), None]) == BEFORE_ALL
    assert ready([[Rec(topics.REPORTS, 0, 0)]], record_key, BEFORE_ALL) == []
    assert horizon([]) is None  # nothing open: everything read may be folded


def test_the_rank_is_the_log_topic_order_under_any_prefix() -> None:
    prefixed = TopicOrder("acme.")
    for rank, topic in enumerate(topics.ALL_TOPICS):
        assert order_key(topic, 7, 3) == (7, rank, 3)
        assert prefixed.key("acme." + topic, 7, 3) == (7, rank, 3)


def test_every_processor_lists_its_inputs_in_the_log_topic_order() -> None:
    everything_on = Settings.of(track_sessions=True, judge_turns=True, rollouts=True)
    hosted = processors(everything_on)
    assert len(hosted) == 5  # join, chain, sessions, feedback, rollout controller
    for processor in hosted:
        ranks = [topics.ALL_TOPICS.index(topic) for topic in processor.inputs]
        assert ranks == sorted(ranks), processor.name


class Echo:
    """A processor that counts what it saw and answers each event with itself."""

    name = "echo"
    inputs = (topics.INFERENCE,)
    output = topics.INFERENCE

    def step(self, state: KeyValueState, event: Event) -> list[Event]:
        state.set("seen", (state.get("seen") or 0) + 1)
        return [event]


def test_fold_skips_undecodable_records_and_keeps_the_steps_order() -> None:
    first, second = (inference("s", receipt("s", i), at(i)) for i in range(2))
    state = DictState()
    assert fold(Echo(), state, [first, None, second]) == [first, second]
    assert state.data == {"seen": 2}
