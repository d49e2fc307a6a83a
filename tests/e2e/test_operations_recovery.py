"""Operator tooling end to end: disaster recovery on Kafka.

Disaster recovery runs on Kafka (its own topic prefix, a ``reef streams`` worker): after
the mixed workload of :func:`tests.support.operations.run_workload` the server is
stopped and its state dir wiped; ``reef replay --compare-live`` agrees with the worker's
state, and a fresh server on an empty state dir answers the same heads and report fates,
with ``reef.samples`` unchanged (and equal to what re-running the join over the inputs
derives).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from reef.artifacts import LocalArtifactStore
from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.events import Event
from reef.core.join import JoinProcessor
from reef.core.state import DictState
from reef.log.kafka import delete_prefixed_topics
from reef.services.eventstore import EventStore
from reef.services.replay import ordered_events
from reef.testing.servers import (
    ReefProcess,
    UpstreamProcess,
    run_reef,
    start_reef,
)
from tests.support.deployment import Deployment
from tests.support.operations import deployment_env, run_workload
from tests.support.streams import StreamsWorker, start_streams_with


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---------------------------------------------------------------------------
# Disaster recovery on Kafka


def wait_inputs_committed(dep: Deployment, prefix: str, worker: StreamsWorker) -> None:
    """The worker's group has committed every input record (its changelogs are complete)."""
    from reef.catalog import processors
    from reef.settings import Settings

    group = topics.STREAMS_APP_ID  # the log prefixes groups like topics
    inputs = {t for p in processors(Settings.from_flat({})) for t in p.inputs}

    async def behind() -> dict[str, int]:
        log = dep.new_log()
        await log.start()
        try:
            out = {}
            for topic in sorted(inputs):
                ends = await log.end_offsets(topic)
                done = await log.committed(group, topic)
                lag = sum(end - done.get(p, 0) for p, end in ends.items())
                if lag:
                    out[topic] = lag
            return out
        finally:
            await log.close()

    deadline = time.monotonic() + 60
    while lagging := _run(behind()):
        assert worker.managed.running(), f"reef streams died\n{worker.managed.output()}"
        assert time.monotonic() < deadline, f"inputs not committed in time: {lagging}"
        time.sleep(0.5)


def derive_samples(dep: Deployment) -> list[Event]:
    """What the join emits when re-run over its inputs from the beginning."""

    async def run() -> list[Event]:
        log = dep.new_log()
        await log.start()
        try:
            join, state = JoinProcessor(), DictState()
            out: list[Event] = []
            for event in await ordered_events(EventStore(log), join.inputs):
                out += join.step(state, event)
            return out
        finally:
            await log.close()

    found: list[Event] = _run(run())
    return found


def positioned(dep: Deployment) -> dict[tuple[int, int], Event]:
    """reef.samples by position (Kafka interleaves partitions arbitrarily when reading)."""
    return {
        (s.record.partition, s.record.offset): s.event
        for s in dep.stored(topics.SAMPLES, raw=True)  # as the join wrote them
        if s.event is not None
    }


def per_scenario(events: list[Event]) -> dict[str, list[Event]]:
    """Events by scenario, in order (a scenario's events share one partition)."""
    out: dict[str, list[Event]] = {}
    for event in events:
        out.setdefault(event.scenario, []).append(event)
    return out


def status_digest(dep: Deployment) -> str:
    with dep.client(token=dep.read_token) as client:
        response = client.get("/reef/status")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["projection"]["healthy"] is True, body
    digest: str = body["projection"]["digest"]
    return digest


@pytest.mark.kafka
@pytest.mark.slow
def test_disaster_recovery_from_kafka_alone(
    kafka_bootstrap: str, upstream: UpstreamProcess, tmp_path: Path
) -> None:
    from reef.log.kafka import KafkaLog

    prefix = f"t-ops-dr-{uuid.uuid4().hex[:10]}-"
    log_flags = ["--log", "kafka", "--kafka-bootstrap", kafka_bootstrap]
    log_flags += ["--kafka-topic-prefix", prefix]
    created = run_reef("topics", "create", *log_flags)
    assert created.returncode == 0, f"reef topics create:\n{created.stdout}\n{created.stderr}"
    worker = start_streams_with(log_flags, tmp_path / "streams")
    admin, reader = f"adm-{secrets.token_hex(8)}", f"rd-{secrets.token_hex(8)}"
    env = deployment_env(admin, reader)
    state_1, state_2 = tmp_path / "state-1", tmp_path / "state-2"
    processes: list[ReefProcess] = []

    def serve(state_dir: Path) -> Deployment:
        process = start_reef(
            [*log_flags, "--upstream-url", upstream.v1_url], env=env, state_dir=state_dir
        )
        processes.append(process)
        return Deployment(
            name="kafka",
            process=process,
            admin_token=admin,
            read_token=reader,
            new_log=lambda: KafkaLog(
                kafka_bootstrap, topic_prefix=prefix, client_id="reef-ops-test"
            ),
            content=ContentStore(LocalArtifactStore.in_state_dir(state_dir)),
            log_flags=log_flags,
            decide_timeout=60.0,
        )

    try:
        first = serve(state_1)
        worker.wait_ready()
        history = run_workload(first, "dr")
        wait_inputs_committed(first, prefix, worker)

        heads = {s: first.releases(s) for s in (history.a, history.b)}
        fates = {rid: first.fate(s, rid) for rid, s in history.reports.items()}
        samples = positioned(first)
        digest = status_digest(first)
        assert heads[history.a][0]["release_id"] == history.rolled_back["release_id"]
        assert Counter(type(e).__name__ for e in samples.values()) == {
            "SampleJoined": 4,
            "ReportRejected": 3,
        }

        # the disaster: the server and everything it kept locally are gone
        first.process.stop()
        shutil.rmtree(state_1)
        assert not state_1.exists()

        replayed = run_reef("replay", "--compare-live", *log_flags)
        assert replayed.returncode == 0, f"{replayed.stdout}\n{replayed.stderr}"
        report = json.loads(replayed.stdout)
        assert report["equal"] is True, report
        assert set(report["live"]) == {"join", "chain"}
        assert report["replayed"]["api"] == digest
        assert report["events"] > 0

        # the samples topic is what the join derives from the inputs alone
        in_order = [samples[position] for position in sorted(samples)]
        assert per_scenario(derive_samples(first)) == per_scenario(in_order)

        second = serve(state_2)
        assert {s: second.releases(s) for s in heads} == heads
        assert {rid: second.fate(s, rid) for rid, s in history.reports.items()} == fates
        assert positioned(second) == samples
        assert status_digest(second) == digest
        wait_inputs_committed(second, prefix, worker)
        assert positioned(second) == samples, "the new server caused new samples"
        assert worker.managed.running(), worker.managed.output()
    finally:
        for process in processes:
            process.stop()
        worker.managed.stop(timeout=20)
        _run(delete_prefixed_topics(kafka_bootstrap, prefix))
