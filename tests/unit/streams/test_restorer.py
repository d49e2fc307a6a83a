"""The Kafka host's changelog restorer (streams/restorer.py), over a stand-in consumer
and real RocksDB stores: each store reads from its own position to the end the partition
had when the restore began, and is caught up to that end."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.records import FetchedRecord, TopicPartition
from streams.restorer import restore_stores
from streams.store import Change, PartitionStore

A, B = TopicPartition("g-join-state-changelog", 0), TopicPartition("g-chain-state-changelog", 0)


class Changelogs:
    """The consumer calls the restorer makes, over in-memory partitions; a record
    appended after ``end_offsets`` was asked stands for another owner's late commit."""

    def __init__(self, partitions: dict[TopicPartition, list[tuple[bytes, bytes | None]]]) -> None:
        self.partitions = {
            tp: [FetchedRecord(tp.topic, tp.partition, i, 0, k, v) for i, (k, v) in enumerate(kvs)]
            for tp, kvs in partitions.items()
        }
        self.positions: dict[TopicPartition, int] = {}
        self.assigned: list[TopicPartition] = []
        self.late: dict[TopicPartition, list[tuple[bytes, bytes | None]]] = {}

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        ends = {tp: len(self.partitions[tp]) for tp in tps}
        for tp, extra in self.late.items():  # offsets go on from the end
            start = len(self.partitions[tp])
            self.partitions[tp] += [
                FetchedRecord(tp.topic, tp.partition, start + i, 0, k, v)
                for i, (k, v) in enumerate(extra)
            ]
        return ends

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        self.assigned = list(tps)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    async def poll(
        self, *tps: TopicPartition, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[FetchedRecord]]:
        out = {}
        for tp in tps:
            chunk = self.partitions[tp][self.positions[tp] : self.positions[tp] + 2]
            self.positions[tp] += len(chunk)
            if chunk:
                out[tp] = chunk
        return out

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]


def rows(values: dict[str, Any]) -> list[tuple[bytes, bytes | None]]:
    changes = [Change.of(k, v) for k, v in values.items()]
    return [(c.raw_key, c.raw_value) for c in changes]


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[TopicPartition, PartitionStore]]:
    opened = {A: PartitionStore(tmp_path / "a"), B: PartitionStore(tmp_path / "b")}
    yield opened
    for store in opened.values():
        store.close()


async def test_each_store_reads_from_its_position_to_the_end_at_the_start(
    stores: dict[TopicPartition, PartitionStore],
) -> None:
    log = Changelogs({A: rows({"k1": 1, "k2": 2, "k3": 3}), B: rows({"x": "kept"})})
    log.late = {A: rows({"late": 9})}  # committed by another owner once the restore began
    stores[B].commit([Change.of("x", "kept")], position=1)  # a kept store, already current
    copied = await restore_stores(log, stores)
    assert copied == 4  # A's three and the late record polled with them; B none
    assert [stores[A].get(k) for k in ("k1", "k2", "k3", "late")] == [1, 2, 3, None]
    assert stores[A].position == 3 and stores[B].position == 1
    assert log.assigned == []  # nothing left assigned to the restorer


async def test_a_store_restores_only_what_it_lacks(
    stores: dict[TopicPartition, PartitionStore],
) -> None:
    log = Changelogs({A: rows({"k1": 1, "k2": 2, "k3": None}), B: []})
    stores[A].commit([Change.of("k1", 1)], position=1)
    assert await restore_stores(log, stores) == 2
    assert stores[A].get("k2") == 2 and stores[A].get("k3") is None
    assert stores[A].position == 3 and stores[B].position == 0
