"""Both processor hosts pass the host contract (tests/contracts/host.py), as real
``reef streams`` processes: the embedded host on a state directory, the Kafka host on
the single-node broker under its own topic prefix."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reef.core.topics import LOG_TOPICS
from reef.hosts import embedded as embedded_host
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import KafkaLog, delete_prefixed_topics
from reef.settings import Settings
from streams import changelog
from tests.contracts.host import HostContract, HostRig, JoinContract
from tests.support.hosts import HostProcess
from tests.support.wire import confluent_codec, confluent_env

pytestmark = pytest.mark.slow
#: the hosts run the rollout controller too (off by default in a deployment)
ROLLOUTS = {"REEF_ROLLOUTS": "true"}


class TestEmbeddedHost(HostContract):
    @pytest.fixture
    async def rig(self, tmp_path: Path) -> AsyncIterator[HostRig]:
        state = tmp_path / "state"
        settings = Settings.of(log="embedded", state_dir=state, rollouts=True)
        log = EmbeddedLog(state / "log.sqlite3", partitions=settings.deployment.partitions)
        await log.start()
        await log.ensure_topics(list(LOG_TOPICS))
        host = HostProcess(
            ["--log", "embedded", "--state-dir", str(state)], tmp_path / "logs", env=ROLLOUTS
        )
        try:
            yield HostRig(settings, log, host, embedded_host.durable_tables)
        finally:
            host.stop()
            await log.close()


@pytest.mark.kafka
class TestKafkaHost(HostContract):
    @pytest.fixture
    async def rig(self, kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[HostRig]:
        prefix = f"host-{uuid.uuid4().hex[:8]}."
        settings = Settings.of(
            log="kafka", kafka_bootstrap=kafka_bootstrap, kafka_topic_prefix=prefix, rollouts=True
        )
        log = KafkaLog(kafka_bootstrap, topic_prefix=prefix, client_id="reef-host-contract")
        await log.start()
        await log.ensure_topics(list(LOG_TOPICS))
        flags = ["--log", "kafka", "--kafka-bootstrap", kafka_bootstrap]
        host = HostProcess(
            [*flags, "--kafka-topic-prefix", prefix],
            tmp_path / "logs",
            # a static member with a short session: a restarted host takes its
            # partitions back at once (rebalances: test_streams_scaleout.py)
            env={
                **ROLLOUTS,
                "REEF_STREAMS_SESSION_TIMEOUT_S": "6",
                "REEF_STREAMS_INSTANCE_ID": f"reef-test-{prefix}worker",
            },
        )
        try:
            yield HostRig(settings, log, host, changelog.durable_tables)
        finally:
            host.stop()
            await log.close()
            await delete_prefixed_topics(kafka_bootstrap, prefix)


@pytest.mark.kafka
class TestKafkaHostConfluent(JoinContract):
    """The Kafka host of a ``wire_format: confluent`` deployment: inputs and outputs are
    00 + registry id + body (HostRig.read checks each record), exactly once, replay equal."""

    @pytest.fixture
    async def rig(
        self, kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path
    ) -> AsyncIterator[HostRig]:
        prefix = f"host-cf-{uuid.uuid4().hex[:8]}."
        codec = confluent_codec(schema_registry_url, prefix)
        settings = Settings.of(
            log="kafka",
            kafka_bootstrap=kafka_bootstrap,
            kafka_topic_prefix=prefix,
            rollouts=True,
            schema_registry_url=schema_registry_url,
            wire_format="confluent",
        )
        log = KafkaLog(kafka_bootstrap, topic_prefix=prefix, client_id="reef-host-contract")
        await log.start()
        await log.ensure_topics(list(LOG_TOPICS))
        flags = ["--log", "kafka", "--kafka-bootstrap", kafka_bootstrap]
        host = HostProcess(
            [*flags, "--kafka-topic-prefix", prefix],
            tmp_path / "logs",
            env={
                **ROLLOUTS,
                **confluent_env(schema_registry_url),
                "REEF_STREAMS_SESSION_TIMEOUT_S": "6",
                "REEF_STREAMS_INSTANCE_ID": f"reef-test-{prefix}worker",
            },
        )
        try:
            yield HostRig(settings, log, host, changelog.durable_tables, codec)
        finally:
            host.stop()
            await log.close()
            await delete_prefixed_topics(kafka_bootstrap, prefix)
