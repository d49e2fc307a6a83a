"""The EventLog contract on the Kafka adapter (the local single-node broker)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from reef.log.base import EventLog
from reef.log.kafka import KafkaLog
from tests.contract_log import LogContract

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
