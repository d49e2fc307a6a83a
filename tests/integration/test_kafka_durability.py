"""No acknowledged append is lost when a broker of the three-node cluster crashes.

A topic with replication factor 3 and ``min.insync.replicas=2`` (what
``KafkaLog.ensure_topics`` creates on a cluster of three) takes a stream of acks=all
appends while the broker leading most of its partitions is SIGKILLed and, later,
restarted. Appends that fail during the fail-over are fine (they were never
acknowledged); every acknowledged one must be read back (read_committed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from reef.contracts.log import read_all
from reef.core.errors import LogError
from reef.log.base import Position
from reef.log.kafka import KafkaLog

pytestmark = [pytest.mark.kafka, pytest.mark.cluster, pytest.mark.slow]

PARTITIONS = 3
WRITERS = 6


async def describe(bootstrap: str, topic: str) -> tuple[dict[int, int], dict[int, int], str]:
    """(partition -> replica count, partition -> leader, min.insync.replicas)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        # each describe may ask a different broker; metadata and leaders reach them a
        # moment apart
        deadline = time.monotonic() + 30
        while True:
            (description,) = await admin.describe_topics([topic])
            partitions = description["partitions"]
            settled = len(partitions) == PARTITIONS and all(p["leader"] >= 0 for p in partitions)
            if settled or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        replicas = {p["partition"]: len(p["replicas"]) for p in description["partitions"]}
        leaders = {p["partition"]: p["leader"] for p in description["partitions"]}
        min_isr = await topic_min_isr(admin, topic, deadline)
    finally:
        await admin.close()
    return replicas, leaders, min_isr


async def topic_min_isr(admin: AIOKafkaAdminClient, topic: str, deadline: float) -> str:
    """The topic's min.insync.replicas, asking again while the answering broker has not
    learnt of the topic yet (an error code and no entries)."""
    while True:
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"min.insync.replicas": None})]
        )
        resource = response.to_object()["resources"][0]
        values = [
            e["config_value"]
            for e in resource["config_entries"]
            if e["config_names"] == "min.insync.replicas"
        ]
        if values:
            return str(values[0])
        if time.monotonic() > deadline:
            raise AssertionError(f"no min.insync.replicas for {topic}: {resource}")
        await asyncio.sleep(0.2)


async def test_no_acknowledged_append_is_lost_when_a_broker_dies(
    kafka_cluster: Any, new_topic_name: Callable[..., str]
) -> None:
    topic = new_topic_name("durability")
    log = KafkaLog(
        kafka_cluster.bootstrap, partitions=PARTITIONS, client_id="reef-durability",
        request_timeout_ms=8000,
    )
    await log.start()
    acknowledged: dict[bytes, Position] = {}
    failed: list[bytes] = []
    phase = {"name": "before"}
    acks_by_phase: Counter[str] = Counter()
    stop = asyncio.Event()

    async def writer(worker: int) -> None:
        seq = 0
        while not stop.is_set():
            value = f"w{worker}-{seq}".encode()
            seq += 1
            try:
                position = await log.append(topic, f"key-{seq % 17}".encode(), value)
            except LogError:
                failed.append(value)
                await asyncio.sleep(0.05)
                continue
            acknowledged[value] = position
            acks_by_phase[phase["name"]] += 1

    try:
        await log.ensure_topics([topic])
        replicas, leaders, min_isr = await describe(kafka_cluster.bootstrap, topic)
        assert replicas == dict.fromkeys(range(PARTITIONS), 3)
        assert min_isr == "2"
        victim_id = Counter(leaders.values()).most_common(1)[0][0]
        victim = next(b for b in kafka_cluster.brokers if b.node_id == victim_id)

        tasks = [asyncio.create_task(writer(w)) for w in range(WRITERS)]
        try:
            await asyncio.sleep(2.0)
            phase["name"] = "broker-down"
            victim.kill()
            # leadership moves to the two survivors (broker session timeout: ~9 s), then
            # acks=all appends go on with two in-sync replicas
            deadline = time.monotonic() + 25.0
            while acks_by_phase["broker-down"] < 100 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            phase["name"] = "restarting"
            started = time.monotonic()
            # (start() is a no-op if something else - another test session sharing the
            # cluster - already restarted it)
            await asyncio.to_thread(victim.start, wait=True, timeout=120.0)
            phase["name"] = "after"
            await asyncio.sleep(max(0.0, 2.0 - (time.monotonic() - started)) + 1.0)
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(asyncio.gather(*tasks), 30)

        print(f"acks by phase {dict(acks_by_phase)}, failed appends {len(failed)}")
        assert acks_by_phase["before"] > 0
        assert acks_by_phase["broker-down"] >= 100, "two in-sync replicas must keep acking"
        assert acks_by_phase["after"] > 0

        records = await read_all(log, topic, timeout=60)
        stored = {r.value: r for r in records}
        lost = [v for v in acknowledged if v not in stored]
        assert not lost, f"{len(lost)} acknowledged appends lost, e.g. {lost[:5]}"
        for value, position in acknowledged.items():
            record = stored[value]
            assert (record.partition, record.offset) == (position.partition, position.offset)
        # the idempotent producer never duplicates a record, even when it retried
        assert len(stored) == len(records)
    finally:
        await log.close()
