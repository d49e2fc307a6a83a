"""Bringing a task's stores up to their changelogs (step 3 of the rebalance protocol of
:mod:`streams.task_manager`): each store reads its changelog partition, committed records
only, from its own position to the partition's end at the start of the restore, so a kept
store reads only what another owner committed meanwhile and a new one reads everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from streams.records import FetchedRecord, TopicPartition
from streams.store import PartitionStore

#: records asked for per poll while restoring
RESTORE_POLL_RECORDS = 20_000


class ChangelogReader(Protocol):
    """The consumer calls a restore makes (a consumer of no group, reading committed
    records only: :meth:`streams.kafka_consumer.KafkaConsumer.changelog_reader`)."""

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...
    def assign(self, tps: Iterable[TopicPartition]) -> None: ...
    def seek(self, tp: TopicPartition, offset: int) -> None: ...
    async def poll(
        self, *tps: TopicPartition, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[FetchedRecord]]: ...
    async def position(self, tp: TopicPartition) -> int: ...


async def restore_stores(
    restorer: ChangelogReader, targets: Mapping[TopicPartition, PartitionStore]
) -> int:
    """Copy each changelog partition into its store (``restorer`` is assigned the
    partitions it reads, and none after); how many records were copied."""
    if not targets:
        return 0
    ends = await restorer.end_offsets(list(targets))
    todo = [tp for tp, store in targets.items() if ends[tp] > store.position]
    restorer.assign(todo)
    for tp in todo:
        restorer.seek(tp, targets[tp].position)
    count = 0
    while todo:
        polled = await restorer.poll(*todo, timeout_ms=500, max_records=RESTORE_POLL_RECORDS)
        for tp, records in polled.items():
            # a compacted topic holds keyed records only
            targets[tp].restore(
                (r.key, r.value) for r in records if r.offset < ends[tp] and r.key is not None
            )
            count += len(records)
        todo = [tp for tp in todo if await restorer.position(tp) < ends[tp]]
    restorer.assign([])
    for tp, store in targets.items():
        store.caught_up(ends[tp])
    return count
