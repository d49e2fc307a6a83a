"""The following key ring passes the key-ring contract on Kafka's compacted key topic."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from reef.contracts.keyring import KeyRingContract, Rig
from reef.core.topics import KEYS, key_topic_configs
from reef.crypto import key_record, new_data_key, tombstone_record
from reef.crypto.rings import FollowingKeyRing, open_keyring
from reef.log.kafka import KafkaLog

pytestmark = pytest.mark.kafka


class TestFollowingKeyRingOnKafka(KeyRingContract):
    @pytest.fixture
    async def rig(self, kafka_bootstrap: str) -> AsyncIterator[Rig]:
        log = KafkaLog(
            kafka_bootstrap,
            topic_prefix=f"keyring-{uuid.uuid4().hex[:8]}.",
            topic_configs={KEYS: key_topic_configs(1000)},
        )
        await log.start()
        await log.ensure_topics([KEYS])
        ring = open_keyring(log)  # Kafka cannot answer a key directly: the ring follows
        assert isinstance(ring, FollowingKeyRing)
        await ring.start()
        try:
            yield Rig(log, ring)
        finally:
            await ring.close()
            await log.close()


async def test_following_ring_on_kafka_drops_tombstoned_keys(kafka_bootstrap: str) -> None:
    prefix = f"keyring-{uuid.uuid4().hex[:8]}."
    log = KafkaLog(
        kafka_bootstrap, topic_prefix=prefix, topic_configs={KEYS: key_topic_configs(1000)}
    )
    await log.start()
    try:
        await log.ensure_topics([KEYS])
        key_a, key_b = new_data_key(), new_data_key()
        await log.append_many([key_record("a", key_a), key_record("b", key_b)])
        ring = open_keyring(log)
        assert isinstance(ring, FollowingKeyRing)
        await ring.start()
        try:
            assert await ring.get_many(["a", "b"]) == {"a": key_a, "b": key_b}
            await log.append_many([tombstone_record("a")])
            await ring.sync()
            assert await ring.get("a") is None  # the follower applied the tombstone
            assert await ring.get("b") == key_b
            key_c = new_data_key()
            await log.append_many([key_record("c", key_c)])
            assert await ring.get("c") == key_c
        finally:
            await ring.close()
        # a ring that holds a key learns of its tombstone once its read is stale
        eager = FollowingKeyRing(log, max_staleness_s=0.0)
        await eager.start()
        assert await eager.get("b") == key_b
        await log.append_many([tombstone_record("b")])
        assert await eager.get("b") is None
        await eager.close()
        values = {r.key: r.value async for r in log.read(KEYS)}
        assert values[b"a"] == b""  # a tombstone reads back empty
    finally:
        await log.close()
