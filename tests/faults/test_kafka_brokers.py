"""Kafka brokers fail under load: one broker of the 3-node cluster dies, or a broker stalls.

* broker SIGKILL (cluster, RF 3, ``min.insync.replicas=2``): Reef's topics under a fresh
  prefix, ``reef serve`` and ``reef streams`` on the cluster; the broker leading most of
  ``reef.inference``'s partitions is SIGKILLed under load and restarted after. Appends
  waiting for the leader election may get 503; nothing acknowledged is lost.
* network stall: a broker of the test's own (a private single node on free ports, so
  the shared single node other tests use is never paused) is stopped with SIGSTOP for
  longer than every Kafka client timeout (Reef's append timeout 3 s, request timeout
  15 s), then SIGCONT. During the stall every request is refused with 503 (never a
  receipt that is not in the log); after it the service recovers on its own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reef.core import topics
from reef.testing.servers import ReefProcess, UpstreamProcess, run_reef
from reef_dev.load import SteadyLoad
from tests.support import consistency
from tests.support.faults import (
    TOKEN,
    FaultRow,
    FaultTable,
    StreamsWorker,
    create_scenarios,
    kafka_flags,
    kafka_log_factory,
    serve_on_kafka,
)
from tests.support.private_kafka import private_broker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RATE = 10.0
#: longer than Reef's append timeout (3 s here) and aiokafka's request timeout (15 s)
STALL_SECONDS = 16.0
#: an answer slower than this counts as not recovered yet (normal: well under a second)
SLOW_S = 2.0


def serve(
    bootstrap: str, prefix: str, upstream: UpstreamProcess, state_dir: Path, **env: str
) -> ReefProcess:
    return serve_on_kafka(bootstrap, prefix, upstream, state_dir, env=env, timeout=120.0)


async def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        (description,) = await admin.describe_topics([topic])
        return {p["partition"]: p["leader"] for p in description["partitions"]}
    finally:
        await admin.close()


@pytest.mark.cluster
def test_sigkill_of_one_broker_of_three(
    kafka_cluster: Any,
    kafka_prefix: Callable[[str], str],
    streams_worker: Callable[[str, str], StreamsWorker],
    upstream: UpstreamProcess,
    fault_table: FaultTable,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    prefix = kafka_prefix(bootstrap)
    worker = streams_worker(bootstrap, prefix)
    worker.start()
    reef = serve(bootstrap, prefix, upstream, tmp_path / "state")
    victim = None
    try:
        scenarios = create_scenarios(reef.base_url, 3, "broker")
        worker.wait_ready(timeout=120)
        leaders = asyncio.run(_leaders(bootstrap, prefix + topics.INFERENCE))
        victim_id = Counter(leaders.values()).most_common(1)[0][0]
        victim = kafka_cluster.broker(victim_id)
        with SteadyLoad([reef.base_url], TOKEN, scenarios, rate=RATE, timeout=30.0) as load:
            load.wait_acks(20)
            fault_at = time.monotonic()
            victim.kill()
            load.wait_acks(30, since=fault_at, timeout=90)  # two in-sync replicas keep acking
            restart_at = time.monotonic()
            victim.start(wait=True, timeout=120.0)
            back_s = time.monotonic() - restart_at
            load.wait_acks(20, since=time.monotonic(), timeout=60)
            end = time.monotonic()
        result = load.result
        # a worker that wedges exits (streams.watchdog) and is restarted, as by a supervisor
        worker.supervise()
        worker.wait_caught_up(timeout=150, supervised=True)
        report = consistency.check(kafka_log_factory(bootstrap, prefix), result, scenarios)
        fault_table.record(
            FaultRow(
                f"SIGKILL of one broker of three (node {victim_id}, RF 3, min ISR 2)",
                result.offered_rate(fault_at, end),
                result.acknowledged(),
                report.lost,
                report.duplicated,
                result.recovery_seconds(fault_at, slow=SLOW_S),
                f"leader of {sum(1 for v in leaders.values() if v == victim_id)}/"
                f"{len(leaders)} inference partitions; restarted broker back in "
                f"{back_s:.1f} s; p99 {result.latency_p99(fault_at, end):.1f} s; "
                f"errors {dict(result.errors)}; worker restarts: {worker.crashes or 'none'}",
            )
        )
        report.assert_ok()
        # refusals only while leadership moved, and only clean ones
        assert set(result.errors) <= {"chat:503", "report:503"}, result.summary()
        assert reef.managed.running(), reef.output()
    finally:
        reef.stop()
        if victim is not None and not victim.is_running():
            victim.start(wait=True, timeout=180.0)


# ---------------------------------------------------------------------------
# Network stall: SIGSTOP a broker of the test's own


def test_network_stall_of_the_broker(
    streams_worker: Callable[[str, str], StreamsWorker],
    upstream: UpstreamProcess,
    fault_table: FaultTable,
    tmp_path: Path,
) -> None:
    with private_broker(tmp_path / "kafka") as node:
        bootstrap = node.bootstrap
        prefix = "stall-"
        created = run_reef("topics", "create", *kafka_flags(bootstrap, prefix), timeout=120)
        assert created.returncode == 0, f"{created.stdout}\n{created.stderr}"
        worker = streams_worker(bootstrap, prefix)
        # The worker's group session outlives the stall, so the stall itself (not a
        # session expiry) is the fault.
        worker.env["REEF_STREAMS_SESSION_TIMEOUT_S"] = str(int(STALL_SECONDS * 2))
        worker.start()
        reef = serve(
            bootstrap, prefix, upstream, tmp_path / "state", REEF_KAFKA_APPEND_TIMEOUT_S="3"
        )
        pid = node.service.pid()
        assert pid is not None
        try:
            scenarios = create_scenarios(reef.base_url, 2, "stall")
            worker.wait_ready(timeout=120)
            with SteadyLoad([reef.base_url], TOKEN, scenarios, rate=RATE, timeout=30.0) as load:
                load.wait_acks(20)
                fault_at = time.monotonic()
                os.kill(pid, signal.SIGSTOP)
                try:
                    time.sleep(STALL_SECONDS)
                finally:
                    os.kill(pid, signal.SIGCONT)
                resumed_at = time.monotonic()
                load.wait_acks(30, since=resumed_at, timeout=90)
            result = load.result
            restarted = ""
            if not worker.running():  # a commit that hangs through the stall ends the worker (75)
                restarted = "; the stream worker exited during the stall and was restarted"
                worker.start()
                worker.wait_ready(timeout=120)
            worker.wait_caught_up(timeout=90)
            report = consistency.check(kafka_log_factory(bootstrap, prefix), result, scenarios)
            stalled = [
                a for a in result.between(fault_at + 3.5, resumed_at - 3.5) if a.kind == "chat"
            ]
            fault_table.record(
                FaultRow(
                    f"network stall of the broker (SIGSTOP {STALL_SECONDS:.0f} s, then SIGCONT)",
                    result.offered_rate(fault_at, resumed_at),
                    result.acknowledged(),
                    report.lost,
                    report.duplicated,
                    result.recovered_after(resumed_at),
                    f"{sum(1 for a in stalled if a.status == '503')}/{len(stalled)} requests "
                    f"started in the stall answered 503; errors {dict(result.errors)}{restarted}",
                )
            )
            report.assert_ok()
            assert stalled and {a.status for a in stalled} == {"503"}, Counter(
                a.status for a in stalled
            )
            assert set(result.errors) <= {"chat:503", "report:503"}, result.summary()
            assert reef.managed.running(), reef.output()
        finally:
            reef.stop()
            worker.stop()
