"""The EventLog contract on the Kafka adapter (the local single-node broker)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from reef.contracts.log import LogContract
from reef.core.errors import UnknownTopicError
from reef.log.base import EventLog
from reef.log.kafka import KafkaLog, delete_prefixed_topics

pytestmark = pytest.mark.kafka


class TestKafkaLog(LogContract):
    @pytest.fixture
    async def log(self, kafka_bootstrap: str) -> AsyncIterator[EventLog]:
        log = KafkaLog(kafka_bootstrap, partitions=self.PARTITIONS, client_id="reef-contract")
        await log.start()
        try:
            yield log
        finally:
            await log.close()


async def test_a_started_log_answers_offset_questions_with_clients_it_keeps(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API asks every processor's lag every 2 s: a started log starts one consumer and
    one admin client for all such questions (stopped by close); a log never started
    starts them per question and stops them again."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient

    started: list[str] = []
    for cls in (AIOKafkaConsumer, AIOKafkaAdminClient):
        original = cls.start

        async def counting(self: object, _original: object = original) -> None:
            started.append(type(self).__name__)
            await _original(self)  # type: ignore[operator]

        monkeypatch.setattr(cls, "start", counting)
    prefix = f"kept-{uuid.uuid4().hex[:8]}."
    log = KafkaLog(kafka_bootstrap, partitions=2, topic_prefix=prefix, client_id="reef-kept")
    await log.start()
    try:
        await log.ensure_topics(["t"])
        await log.commit("g", "t", {1: 0})
        started.clear()
        for _ in range(5):
            assert await log.end_offsets("t") == {0: 0, 1: 0}
            assert await log.committed("g", "t") == {1: 0}
        with pytest.raises(UnknownTopicError):
            await log.end_offsets("missing")
        assert sorted(started) == ["AIOKafkaAdminClient", "AIOKafkaConsumer"]
        unstarted = KafkaLog(kafka_bootstrap, partitions=2, topic_prefix=prefix)
        started.clear()
        for _ in range(2):
            assert await unstarted.end_offsets("t") == {0: 0, 1: 0}
        assert started == ["AIOKafkaConsumer", "AIOKafkaConsumer"]  # one per question
    finally:
        await log.close()
        await delete_prefixed_topics(kafka_bootstrap, prefix)
