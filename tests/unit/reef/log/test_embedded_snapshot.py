"""The embedded host's batch read: one snapshot of every input, a share of each partition,
and replay's order per partition whatever the batch size."""

import asyncio
from collections import defaultdict
from pathlib import Path

from reef.codec import EventCodec
from reef.core import topics
from reef.core.events import Event
from reef.core.join import JoinProcessor
from reef.core.state import KeyValueState
from reef.hosts.embedded import EmbeddedRuntime
from reef.log.base import PendingAppend
from reef.log.embedded import EmbeddedLog
from reef.log.partitioner import partition_for
from reef.services.eventstore import EventStore
from reef.services.replay import ordered_events
from reef_dev.events import inference, receipt, report
from tests.support.embedded_join import at

#: scenarios on three different partitions; the first gets most of the traffic
SCENARIOS = ("skew-a", "skew-c", "skew-e")


class RecordingJoin(JoinProcessor):
    """The join, noting the order in which the host feeds it events."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name  # its own positions and state rows
        self.seen: list[Event] = []

    def step(self, state: KeyValueState, event: Event) -> list[Event]:
        self.seen.append(event)
        return super().step(state, event)


def pending(event: Event) -> PendingAppend:
    value, headers = EventCodec().encode(event)
    topic = topics.INFERENCE if event.type_name() == "InferenceRecorded" else topics.REPORTS
    return PendingAppend(topic, event.scenario.encode(), value, tuple(headers))


async def skewed_backlog(log: EmbeddedLog) -> int:
    """Exchanges and the reports on them, appended in many small groups (so the two topics
    interleave in append time), 8 times more on the first scenario than on the others."""
    count = 0
    for i in range(60):
        for scenario in SCENARIOS if i % 8 == 0 else SCENARIOS[:1]:
            rec = receipt(scenario, i)
            group = [pending(inference(scenario, rec, at(i)))]
            if i % 3:  # some reports come with their exchange, others one round later
                group.append(pending(report(scenario, f"r-{i}", [rec], at(i))))
            if i % 3 == 0 and i:
                prev = receipt(scenario, i - 1)
                group.append(pending(report(scenario, f"late-{i}", [prev], at(i))))
            await log.append_many(group)
            count += len(group)
    return count


async def test_a_snapshot_reads_a_share_of_each_partition_below_its_end(
    log: EmbeddedLog,
) -> None:
    await skewed_backlog(log)
    inputs = (topics.INFERENCE, topics.REPORTS)
    snapshot = await log.read_snapshot(inputs, {topics.INFERENCE: {}, topics.REPORTS: {}}, 5)
    read: dict[tuple[str, int], list[int]] = defaultdict(list)
    for record in snapshot.records:
        read[(record.topic, record.partition)].append(record.offset)
    assert read  # the backlog is there
    for topic, ends in snapshot.ends.items():
        for partition, end in ends.items():
            assert read.get((topic, partition), []) == list(range(min(5, end)))
    assert {t: sum(e.values()) for t, e in snapshot.ends.items()} == {
        t: sum((await log.end_offsets(t)).values()) for t in inputs
    }


async def test_a_snapshot_starts_at_the_given_positions(log: EmbeddedLog) -> None:
    await skewed_backlog(log)
    busy = partition_for(SCENARIOS[0].encode(), log.partitions)
    start = {topics.INFERENCE: {busy: 40}, topics.REPORTS: {}}
    snapshot = await log.read_snapshot((topics.INFERENCE,), start, 1000)
    offsets = [r.offset for r in snapshot.records if r.partition == busy]
    assert offsets == list(range(40, snapshot.ends[topics.INFERENCE][busy]))


async def test_every_batch_size_feeds_each_partition_in_replays_order(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    total = await skewed_backlog(log)
    expected = await ordered_events(EventStore(log), (topics.INFERENCE, topics.REPORTS))
    for batch_size in (1, 7, 50, 1000):
        join = RecordingJoin(f"order-{batch_size}")
        runtime = EmbeddedRuntime(log, join, batch_size=batch_size)
        await runtime.start()
        try:
            async with asyncio.timeout(60):
                while runtime.processed < total:
                    assert runtime.healthy()
                    await asyncio.sleep(0.01)
        finally:
            await runtime.close()
        assert runtime.processed == total
        assert _per_partition(join.seen, log) == _per_partition(expected, log), batch_size


def _per_partition(events: list[Event], log: EmbeddedLog) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    for event in events:
        out[partition_for(event.scenario.encode(), log.partitions)].append(event.event_id)
    return dict(out)


def test_the_scenarios_sit_on_different_partitions() -> None:
    """The premise of the tests above: three partitions, one of them busier."""
    assert len({partition_for(s.encode(), 6) for s in SCENARIOS}) == len(SCENARIOS)
