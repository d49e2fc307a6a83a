"""Bringing a task's stores up to their changelogs (step 3 of the rebalance protocol of
:mod:`streams.host`): each store reads its changelog partition, committed records only,
from its own position to the partition's end at the start of the restore, so a kept store
reads only what another owner committed meanwhile and a new one reads everything.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from streams.store import PartitionStore

#: records asked for per poll while restoring
RESTORE_POLL_RECORDS = 20_000


async def restore_stores(
    restorer: AIOKafkaConsumer, targets: Mapping[TopicPartition, PartitionStore]
) -> int:
    """Copy each changelog partition into its store (``restorer`` reads committed records
    only; it is assigned the partitions it reads, and none after); how many records were
    copied."""
    if not targets:
        return 0
    ends = await restorer.end_offsets(list(targets))
    todo = [tp for tp, store in targets.items() if ends[tp] > store.position]
    restorer.assign(todo)
    for tp in todo:
        restorer.seek(tp, targets[tp].position)
    count = 0
    while todo:
        polled = await restorer.getmany(*todo, timeout_ms=500, max_records=RESTORE_POLL_RECORDS)
        for tp, messages in polled.items():
            targets[tp].restore((m.key, m.value) for m in messages if m.offset < ends[tp])
            count += len(messages)
        todo = [tp for tp in todo if await restorer.position(tp) < ends[tp]]
    restorer.assign([])
    for tp, store in targets.items():
        store.caught_up(ends[tp])
    return count
