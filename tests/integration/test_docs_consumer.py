"""The documented minimal consumer (docs/consumer.py) decodes Reef's events from Kafka."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from reef.core.events import ScenarioCreated, utc_now
from reef.core.topics import ALL_TOPICS, SCENARIOS
from reef.log.kafka import KafkaLog
from reef.services.eventstore import EventStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.kafka
async def test_the_minimal_consumer_needs_only_the_schemas(kafka_bootstrap: str) -> None:
    prefix = f"docs-{uuid.uuid4().hex[:8]}."
    log = KafkaLog(kafka_bootstrap, topic_prefix=prefix)
    await log.start()
    try:
        await log.ensure_topics(list(ALL_TOPICS))
        scenario = f"docs-{uuid.uuid4().hex[:8]}"
        await EventStore(log).append(ScenarioCreated(
            event_id=uuid.uuid4().hex, scenario=scenario, occurred_at=utc_now(),
            producer="test", recipe="core", initial_release_id="r" * 32,
        ))
    finally:
        await log.close()
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "consumer.py"), "--bootstrap", kafka_bootstrap,
         "--topic", prefix + SCENARIOS, "--schemas", str(ROOT / "schemas"), "--limit", "1"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert scenario in done.stdout and '"recipe": "core"' in done.stdout
