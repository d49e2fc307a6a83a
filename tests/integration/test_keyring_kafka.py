"""The following key ring passes the key-ring contract on Kafka's compacted key topic."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from reef.core.topics import KEYS, key_topic_configs
from reef.crypto.rings import FollowingKeyRing, open_keyring
from reef.log.kafka import KafkaLog
from tests.contract_keyring import KeyRingContract, Rig

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
