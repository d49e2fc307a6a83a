"""The Kafka host (``reef streams``) on the single-node Kafka: exactly-once, CAS, replay.

Each test namespaces its topics with a unique ``--kafka-topic-prefix`` and deletes them
at the end. Workers run as real ``reef streams`` processes, configured through the
environment: the worker's consumer is a static group member (``group.instance.id``) with
a 6 s session timeout, so a worker restarted after SIGKILL takes its partitions back at
once instead of waiting for the dead member's session (rebalances have tests of their
own in test_streams_scaleout.py).

* exactly-once while the worker is SIGKILLed: the host contract
  (tests/contracts/host.py, run by tests/integration/test_host_contract.py);
* compare-and-swap: eight proposers race on one parent: one commit, seven stale_parent;
* replay: after a mixed workload ``reef replay --compare-live`` reports equal digests;
* watchdog: a worker wedged on purpose (SIGUSR2) is ended with status 75;
* bad input: garbage bytes and a tombstone on an input topic are skipped, not fatal.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reef.catalog import processors
from reef.core import topics
from reef.core.events import (
    Event,
    ReleaseCommitted,
    ReleaseProposed,
    ReleaseRejected,
    ReportSubmitted,
    SampleJoined,
)
from reef.core.ids import release_id
from reef.core.topics import STREAMS_APP_ID as APP_ID
from reef.log.kafka import KafkaLog, delete_prefixed_topics
from reef.services.eventstore import EventStore
from reef.services.replay import replay, state_digest
from reef.settings import Settings
from reef.testing.servers import run_reef
from reef_dev.events import created, inference, proposal, receipt, report
from streams.changelog import changelog_table
from tests.support.hosts import HostProcess

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

#: worker settings so a killed member's partitions come back quickly
WORKER_ENV = {"REEF_STREAMS_SESSION_TIMEOUT_S": "6"}
INPUTS = (topics.SCENARIOS, topics.INFERENCE, topics.REPORTS, topics.RELEASE_PROPOSALS)


def now() -> datetime:
    moment = datetime.now(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


# ---------------------------------------------------------------------------
# Namespaced topics, a worker process


@pytest.fixture
async def prefix(kafka_bootstrap: str) -> AsyncIterator[str]:
    """A fresh topic prefix with Reef's topics created; every topic under it deleted after."""
    name = f"t-streams-{uuid.uuid4().hex[:10]}-"
    log = KafkaLog(kafka_bootstrap, topic_prefix=name)
    await log.start()
    await log.ensure_topics(list(topics.ALL_TOPICS))
    await log.close()
    yield name
    await delete_prefixed_topics(kafka_bootstrap, name)


@pytest.fixture
async def log(kafka_bootstrap: str, prefix: str) -> AsyncIterator[KafkaLog]:
    log = KafkaLog(kafka_bootstrap, topic_prefix=prefix, client_id="reef-test-streams")
    await log.start()
    try:
        yield log
    finally:
        await log.close()


#: ``reef streams`` for the test's prefix, a process started, killed and restarted by the test
Worker = HostProcess


@pytest.fixture
def worker(kafka_bootstrap: str, prefix: str, tmp_path: Path) -> Iterator[Worker]:
    w = HostProcess(
        ["--log", "kafka", "--kafka-bootstrap", kafka_bootstrap, "--kafka-topic-prefix", prefix],
        tmp_path / "logs",
        env={**WORKER_ENV, "REEF_STREAMS_INSTANCE_ID": f"reef-test-{prefix}worker"},
    )
    try:
        yield w
    finally:
        w.stop()


# ---------------------------------------------------------------------------
# Reading back


async def events_of(log: KafkaLog, topic: str) -> list[Event]:
    """Decoded events of a topic, read_committed (KafkaLog's readers are)."""
    found = []
    async for stored in EventStore(log).read(topic):
        assert stored.event is not None, stored.error
        found.append(stored.event)
    return found


async def wait_for_count(
    log: KafkaLog, topic: str, count: int, worker: Worker, timeout: float = 90.0
) -> list[Event]:
    deadline = time.monotonic() + timeout
    while True:
        found = await events_of(log, topic)
        if len({e.event_id for e in found}) >= count:
            return found
        worker.assert_running()
        assert time.monotonic() < deadline, f"{len(found)} of {count} on {topic} in time"
        await asyncio.sleep(0.5)


async def wait_until_inputs_committed(log: KafkaLog, worker: Worker, timeout: float = 60.0) -> None:
    """The worker's consumer group committed (in its transactions) every input record."""
    group = APP_ID  # the log prefixes groups like topics
    deadline = time.monotonic() + timeout
    while True:
        behind = {}
        for topic in INPUTS:
            ends = await log.end_offsets(topic)
            done = await log.committed(group, topic)
            lag = sum(end - done.get(p, 0) for p, end in ends.items())
            if lag:
                behind[topic] = lag
        if not behind:
            return
        worker.assert_running()
        assert time.monotonic() < deadline, f"inputs not committed in time: {behind}"
        await asyncio.sleep(0.5)


async def live_table(log: KafkaLog, name: str) -> dict[str, Any]:
    """A processor's table from its changelog, keys decoded."""
    return await changelog_table(log, name)


async def live_join_state(log: KafkaLog) -> dict[str, Any]:
    return await live_table(log, "join")


def state_diff(live: dict[str, Any], replayed: dict[str, Any], limit: int = 8) -> str:
    """The keys where the live table and the replayed state differ, for the failure message."""
    keys = sorted(k for k in set(live) | set(replayed) if live.get(k) != replayed.get(k))
    lines = [f"{len(keys)} keys differ (live vs replayed):"]
    for key in keys[:limit]:
        lines.append(
            f"  {key}: {json.dumps(live.get(key))[:300]} vs {json.dumps(replayed.get(key))[:300]}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# (b) compare-and-swap under a race


async def test_eight_racing_proposals_commit_exactly_one(
    kafka_bootstrap: str, prefix: str, log: KafkaLog, worker: Worker
) -> None:
    worker.start()
    await worker.wait_ready()
    scenario = "race"
    creation = created(scenario, now())
    root = creation.initial_release_id
    await EventStore(log).append(creation)
    await wait_for_count(log, topics.RELEASES, 1, worker)

    async def propose(i: int) -> None:
        own = KafkaLog(kafka_bootstrap, topic_prefix=prefix, client_id=f"proposer-{i}")
        await own.start()
        try:
            await EventStore(own).append(
                proposal(scenario, f"race-{i}", root, f"content-{i}", now())
            )
        finally:
            await own.close()

    await asyncio.gather(*(propose(i) for i in range(8)))
    releases = await wait_for_count(log, topics.RELEASES, 9, worker)
    decisions = [
        e
        for e in releases
        if not (isinstance(e, ReleaseCommitted) and e.proposal_id == creation.event_id)
    ]
    commits = [e for e in decisions if isinstance(e, ReleaseCommitted)]
    rejects = [e for e in decisions if isinstance(e, ReleaseRejected)]
    assert len(commits) == 1, commits
    assert len(rejects) == 7, rejects
    (winner,) = commits
    assert winner.parent_release_id == root
    assert winner.release_id == release_id(scenario, root, winner.content_id, "training")
    assert {r.reason for r in rejects} == {"stale_parent"}
    assert {r.head_release_id for r in rejects} == {winner.release_id}
    assert sorted(d.proposal_id for d in commits + rejects) == sorted(f"race-{i}" for i in range(8))


# ---------------------------------------------------------------------------
# (c) replay digests equal live after a mixed workload


async def mixed_workload(log: KafkaLog, worker: Worker) -> None:
    store = EventStore(log)
    scenarios = ("mix-a", "mix-b", "mix-c")
    creations = [created(s, now()) for s in scenarios]
    await store.append_all(creations + creations[:1])  # a racing replica's creation too
    # phase 1: exchanges and reports (some reports before their exchange)
    first: list[Event] = []
    reports: list[ReportSubmitted] = []
    for i in range(120):
        s = scenarios[i % 3]
        rec = receipt(s, i)
        exchange = inference(s, rec, now(), release=f"rel-{i % 2}")
        rep = report(s, f"rep-{i}", [rec], now())
        reports.append(rep)
        first += [rep, exchange] if i % 5 == 0 else [exchange, rep]
    await store.append_all(first)
    await wait_for_count(log, topics.SAMPLES, 120, worker)
    await wait_for_count(log, topics.RELEASES, 3, worker)
    # phase 2: resends, conflicts, consumed, foreign, unknown (parked), multi-reference
    second: list[Event] = []
    for i, rep in enumerate(reports[:40]):
        s = rep.scenario
        if i % 4 == 0:
            second.append(report(s, rep.event_id, list(rep.references), now()))  # resend
        elif i % 4 == 1:
            second.append(report(s, rep.event_id, list(rep.references), now(), score=0.0))
        elif i % 4 == 2:
            second.append(report(s, f"again-{i}", list(rep.references), now()))
        else:
            other = scenarios[(i + 1) % 3]
            second.append(report(s, f"foreign-{i}", [receipt(other, 9_000 + i)], now()))
    for i in range(6):
        s = scenarios[i % 3]
        second.append(report(s, f"unknown-{i}", [receipt(s, 50_000 + i)], now()))
        pair = [receipt(s, 60_000 + 2 * i), receipt(s, 60_001 + 2 * i)]
        second += [inference(s, r, now()) for r in pair]
        second.append(report(s, f"pair-{i}", pair, now()))
    # proposals: a race per scenario, then a rollback and a pending release + promotion
    heads = {c.scenario: c.initial_release_id for c in creations}
    for s in scenarios:
        second += [proposal(s, f"{s}-p{k}", heads[s], f"c{k}", now()) for k in range(3)]
    await store.append_all(second)
    await wait_for_count(log, topics.RELEASES, 3 + 9, worker)
    for e in await events_of(log, topics.RELEASES):
        if isinstance(e, ReleaseCommitted) and not e.pending:
            heads[e.scenario] = e.release_id
    third: list[Event] = []
    for s in scenarios:
        third.append(
            proposal(
                s, f"{s}-back", heads[s], "c-back", now(), operation="rollback", target="0" * 32
            )  # unknown target
        )
        third.append(proposal(s, f"{s}-pend", heads[s], "c-pend", now(), pending=True))
    await store.append_all(third)
    await wait_for_count(log, topics.RELEASES, 3 + 9 + 6, worker)
    pending = {
        e.scenario: e.release_id
        for e in await events_of(log, topics.RELEASES)
        if isinstance(e, ReleaseCommitted) and e.pending
    }
    promotions = [
        proposal(
            s, f"{s}-promote", heads[s], "c-pend", now(), operation="promote", target=pending[s]
        )
        for s in scenarios
    ]
    redelivered = [e for e in second if isinstance(e, ReleaseProposed)][:2]
    await store.append_all(promotions + redelivered)
    await wait_for_count(log, topics.RELEASES, 3 + 9 + 6 + 3, worker)
    await wait_until_inputs_committed(log, worker)


async def test_replay_digests_equal_live_on_kafka(
    kafka_bootstrap: str, prefix: str, log: KafkaLog, worker: Worker
) -> None:
    worker.start()
    await worker.wait_ready()
    await mixed_workload(log, worker)
    settings = Settings.of(log="kafka", kafka_topic_prefix=prefix)
    result = await replay(processors(settings), log)
    # the processors' live state (changelogs, keys decoded as Faust wrote them) is replay's
    live = await live_join_state(log)
    replayed = result.processor_states
    assert state_digest(live) == state_digest(replayed["join"].data), state_diff(
        live, replayed["join"].data
    )
    chain = await live_table(log, "chain")
    assert state_digest(chain) == state_digest(replayed["chain"].data), state_diff(
        chain, replayed["chain"].data
    )
    # and the tool says so
    done = run_reef(
        "replay",
        "--log",
        "kafka",
        "--kafka-bootstrap",
        kafka_bootstrap,
        "--kafka-topic-prefix",
        prefix,
        "--compare-live",
        timeout=120,
    )
    assert done.stdout.strip(), done.stderr
    body = json.loads(done.stdout)
    assert body["replayed"]["join"] == state_digest(result.processor_states["join"].data)
    assert done.returncode == 0 and body["equal"] is True, done.stdout


# ---------------------------------------------------------------------------
# (d) the watchdog ends a wedged worker


async def test_a_wedged_worker_is_detected_and_exits_75(log: KafkaLog, worker: Worker) -> None:
    """SIGUSR2 stops the host's loop on purpose (alive, consuming nothing, committing
    nothing): the watchdog's own rule, asked of the brokers, must end it with status 75."""
    worker.env["REEF_STREAMS_STALL_TIMEOUT_S"] = "4"
    worker.start()
    await worker.wait_ready()
    store = EventStore(log)
    s = "wedge"
    await store.append_all([inference(s, receipt(s, 0), now(), release="rel-0")])
    await wait_until_inputs_committed(log, worker)  # it works before the wedge
    assert worker.process is not None
    os.kill(worker.process.pid, signal.SIGUSR2)
    await asyncio.sleep(1.0)
    await store.append_all([inference(s, receipt(s, i), now(), release="rel-0") for i in (1, 2)])
    began = time.monotonic()
    while worker.process.running():
        assert time.monotonic() - began < 60, "the wedged worker was not ended in 60 s"
        await asyncio.sleep(0.2)
    took = time.monotonic() - began
    assert worker.process.process.returncode == 75, worker.process.output()
    text = worker.output_text()
    assert "deliberate wedge" in text and "no progress: " in text, text
    assert "records wait after offset" in text, text
    print(f"wedge detected and the worker exited 75 after {took:.1f} s (stall timeout 4 s)")


# ---------------------------------------------------------------------------
# (e) bad records on an input topic are skipped, not fatal


async def test_undecodable_input_records_are_skipped(
    kafka_bootstrap: str, prefix: str, log: KafkaLog, worker: Worker
) -> None:
    """Garbage bytes and a tombstone on reef.reports are logged and skipped; the worker
    stays up and joins the valid report written after them (a record that cannot be
    decoded must not end the worker: its restart would meet the same record again)."""
    from aiokafka import AIOKafkaProducer

    worker.start()
    await worker.wait_ready()
    s = "garbage"
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        target = prefix + topics.REPORTS
        await producer.send_and_wait(target, b"not avro at all", key=s.encode())
        await producer.send_and_wait(target, None, key=s.encode())
    finally:
        await producer.stop()
    rec = receipt(s, 0)
    good = report(s, "rep-after-garbage", [rec], now())
    await EventStore(log).append_all([inference(s, rec, now(), release="rel-0"), good])
    samples = await wait_for_count(log, topics.SAMPLES, 1, worker)
    assert [e.report_id for e in samples if isinstance(e, SampleJoined)] == [good.event_id]
    await wait_until_inputs_committed(log, worker)
    worker.assert_running()
    text = worker.output_text()
    assert text.count("skipping undecodable record") == 2, text[-4000:]
