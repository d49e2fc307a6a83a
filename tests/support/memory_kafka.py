"""Kafka as in-memory lists, for the Kafka host's collaborators without a broker.

:class:`MemoryLog` holds each partition's records and the group's committed offsets.
:class:`MemoryConsumer` reads it as the host's consumers do (the group member's calls and
the changelog reader's, over Reef's typed records); :class:`MemoryProducer` commits a
task's rows and offsets into it at once, as a transaction makes them visible. Every
record written is committed: there are no transaction markers unless a test leaves a
gap (:meth:`MemoryLog.skip`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from streams.kafka_consumer import RebalanceListener
from streams.records import FetchedRecord, Row, TopicPartition


@dataclass
class MemoryLog:
    """Partitions as lists of records (a record's offset is its index, but for gaps),
    and the group's committed offsets."""

    records: dict[TopicPartition, list[FetchedRecord]] = field(default_factory=dict)
    #: the offset after each partition's last record or gap
    ends: dict[TopicPartition, int] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)

    def append(
        self, tp: TopicPartition, key: bytes | None, value: bytes | None, timestamp_ms: int = 0
    ) -> FetchedRecord:
        offset = self.ends.get(tp, 0)
        record = FetchedRecord(tp.topic, tp.partition, offset, timestamp_ms, key, value)
        self.records.setdefault(tp, []).append(record)
        self.ends[tp] = offset + 1
        return record

    def skip(self, tp: TopicPartition) -> None:
        """An offset that holds no data record (a transaction's commit marker)."""
        self.ends[tp] = self.ends.get(tp, 0) + 1

    def end(self, tp: TopicPartition) -> int:
        return self.ends.get(tp, 0)

    def since(self, tp: TopicPartition, offset: int) -> list[FetchedRecord]:
        return [r for r in self.records.get(tp, []) if r.offset >= offset]


class MemoryConsumer:
    """A consumer over a :class:`MemoryLog`: each poll returns up to ``per_poll`` records
    (its ``fetch_sizes`` for some) of each assigned partition from its position, but for
    the paused ones and those ``withheld`` (a fetch that has not come back yet: their
    records wait, as the last stable offset shows); seeks and polls are counted."""

    def __init__(
        self,
        log: MemoryLog,
        *,
        per_poll: int = 1000,
        fetch_sizes: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        self.log = log
        self.per_poll = per_poll
        #: partitions fetched in pieces of another size than ``per_poll``
        self.fetch_sizes = dict(fetch_sizes or {})
        self.assigned: set[TopicPartition] = set()
        self.positions: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        self.withheld: set[TopicPartition] = set()
        self.seeks: list[tuple[TopicPartition, int]] = []
        self.polls = 0
        self.listener: RebalanceListener | None = None

    async def start(self) -> None:
        pass

    async def stop(self, *, leave_group: bool = False) -> None:
        pass

    def subscribe(self, topics: Iterable[str], listener: RebalanceListener, fatal: object) -> None:
        self.listener = listener

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        self.assigned = set(tps)

    async def poll(
        self, *tps: TopicPartition, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[FetchedRecord]]:
        self.polls += 1
        out = {}
        for tp in sorted(tps or self.assigned):
            if tp in self.paused or tp in self.withheld:
                continue
            position = self.positions.get(tp, 0)
            size = max_records or self.fetch_sizes.get(tp, self.per_poll)
            records = self.log.since(tp, position)[:size]
            if records:
                out[tp] = records
                self.positions[tp] = records[-1].offset + 1
            elif position < self.log.end(tp):
                self.positions[tp] = self.log.end(tp)  # past markers, as a fetch moves
        await asyncio.sleep(0 if out else 0.001)  # a poll lets the event loop run
        return out

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))
        self.positions[tp] = offset

    def pause(self, *tps: TopicPartition) -> None:
        self.paused |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused -= set(tps)

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.log.committed.get(tp)

    async def position(self, tp: TopicPartition) -> int:
        return self.positions.get(tp, 0)

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return self.log.end(tp)

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 0 for tp in tps}

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.log.end(tp) for tp in tps}


class MemoryProducer:
    """Task ``partition``'s producer: a commit appends its rows to partition ``partition``
    of their topics and sets the group's committed offsets, at once."""

    def __init__(self, log: MemoryLog, partition: int, changelogs: Iterable[str]) -> None:
        self.log = log
        self.partition = partition
        self.changelogs = set(changelogs)
        self.commits = 0
        self.stopped = False

    async def commit(
        self, rows: Mapping[str, Sequence[Row]], offsets: Mapping[TopicPartition, int]
    ) -> dict[str, int]:
        assert not self.stopped, "a stopped (fenced) producer committed"
        ends = {}
        for topic, topic_rows in rows.items():
            tp = TopicPartition(topic, self.partition)
            for key, value, _ in topic_rows:
                self.log.append(tp, key, value)
            if topic in self.changelogs and topic_rows:
                ends[topic] = self.log.end(tp)
        self.log.committed.update(offsets)
        self.commits += 1
        return ends

    async def stop(self) -> None:
        self.stopped = True
