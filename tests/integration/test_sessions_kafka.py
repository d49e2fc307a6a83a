"""The session processor hosted on Kafka by ``reef streams``: turns out, replay-exact.

Exchanges appended to ``reef.inference`` (with the fingerprints the API records) come
out of a real worker as one ``TurnCompleted`` per bound turn on ``reef.turns``: a retry
and a side call bind nothing; the worker's changelog table equals the replayed state.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from reef.catalog import processors
from reef.core import topics
from reef.core.events import Event, TurnCompleted
from reef.core.ids import derived_id
from reef.log.kafka import KafkaLog, delete_prefixed_topics
from reef.services.eventstore import EventStore
from reef.services.replay import replay, state_digest
from reef.settings import Settings
from streams.changelog import changelog_table
from tests.support.hosts import HostProcess
from tests.support.sessions import assistant, exchange, user

pytestmark = [pytest.mark.kafka]

SCENARIO = "kafka-sessions"


@pytest.fixture
async def prefix(kafka_bootstrap: str) -> AsyncIterator[str]:
    name = f"t-sessions-{uuid.uuid4().hex[:10]}-"
    log = KafkaLog(kafka_bootstrap, topic_prefix=name)
    await log.start()
    await log.ensure_topics(list(topics.ALL_TOPICS))
    await log.close()
    yield name
    await delete_prefixed_topics(kafka_bootstrap, name)


@pytest.fixture
async def log(kafka_bootstrap: str, prefix: str) -> AsyncIterator[KafkaLog]:
    log = KafkaLog(kafka_bootstrap, topic_prefix=prefix, client_id="reef-test-sessions")
    await log.start()
    try:
        yield log
    finally:
        await log.close()


@pytest.fixture
def worker(kafka_bootstrap: str, prefix: str, tmp_path: Path) -> Iterator[HostProcess]:
    w = HostProcess(
        ["--log", "kafka", "--kafka-bootstrap", kafka_bootstrap, "--kafka-topic-prefix", prefix],
        tmp_path / "logs",
        env={"REEF_TRACK_SESSIONS": "true", "REEF_STREAMS_INSTANCE_ID": f"reef-test-{prefix}w"},
    )
    try:
        yield w
    finally:
        w.stop()


async def turns_of(log: KafkaLog) -> list[Event]:
    return [s.event async for s in EventStore(log).read(topics.TURNS) if s.event is not None]


async def test_reef_streams_hosts_the_session_processor(
    prefix: str, log: KafkaLog, worker: HostProcess
) -> None:
    worker.start()
    await worker.wait_ready()
    q1 = [user("what is 2+2?")]
    t2 = [*q1, assistant("5"), user("no, try again")]
    await EventStore(log).append_all(
        [
            exchange("r1", 0, q1, "5", scenario=SCENARIO),
            exchange("r1-retry", 1, q1, "5", scenario=SCENARIO),
            exchange("side", 2, [*q1, user("title?")], "t", scenario=SCENARIO, tools=False),
            exchange("r2", 3, t2, "4", scenario=SCENARIO),
        ]
    )
    deadline = time.monotonic() + 15
    while not (found := await turns_of(log)):
        worker.assert_running()
        assert time.monotonic() < deadline, "no TurnCompleted on reef.turns in 15 s"
        await asyncio.sleep(0.3)
    (turn,) = found
    assert isinstance(turn, TurnCompleted)
    assert turn.event_id == derived_id("turn-completed", SCENARIO, "r1", "r2")
    assert (turn.receipt_id, turn.next_receipt_id, turn.next_state_role) == ("r1", "r2", "user")
    settings = Settings.of(log="kafka", kafka_topic_prefix=prefix, track_sessions=True)
    replayed = (await replay(processors(settings), log)).processor_states["sessions"].data
    live = await changelog_table(log, "sessions")
    assert state_digest(live) == state_digest(replayed), (live, replayed)
