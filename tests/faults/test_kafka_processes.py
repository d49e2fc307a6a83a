"""Processes of a Kafka deployment die under load: an API replica, a stream worker.

Each test runs on the single-node Kafka under its own topic prefix (deleted after):
``reef streams`` for the join and the chain, one or two ``reef serve`` replicas,
and the steady load (chat completions + a report on each receipt).

* API replica: two replicas share the log; one is SIGKILLed, the clients fail over to the
  other, the dead one is restarted on its port. Every receipt acknowledged before, during
  and after is in the log.
* stream worker: the worker is SIGKILLed and restarted (static membership); the
  API keeps acknowledging (the log does not need the worker), and once the worker is
  back every report has exactly one fate, no sample twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reef.testing.servers import ReefProcess, UpstreamProcess
from reef_dev.load import SteadyLoad
from tests.support import consistency
from tests.support.faults import (
    TOKEN,
    FaultRow,
    FaultTable,
    StreamsWorker,
    create_scenarios,
    kafka_log_factory,
    serve_on_kafka,
    sigkill,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RATE = 10.0


def test_sigkill_of_an_api_replica(
    kafka_bootstrap: str,
    kafka_prefix: Callable[[str], str],
    streams_worker: Callable[[str, str], StreamsWorker],
    upstream: UpstreamProcess,
    fault_table: FaultTable,
    tmp_path: Path,
) -> None:
    prefix = kafka_prefix(kafka_bootstrap)
    worker = streams_worker(kafka_bootstrap, prefix)
    worker.start()
    replicas: list[ReefProcess] = []
    try:
        for name in ("a", "b"):
            replicas.append(
                serve_on_kafka(
                    kafka_bootstrap, prefix, upstream, tmp_path / name, name=f"replica-{name}"
                )
            )
        victim, survivor = replicas
        scenarios = create_scenarios(survivor.base_url, 2, "replica")
        worker.wait_ready()
        with SteadyLoad([victim.base_url, survivor.base_url], TOKEN, scenarios, rate=RATE) as load:
            load.wait_acks(20)
            fault_at = time.monotonic()
            sigkill(victim.managed)
            load.wait_acks(30, since=fault_at)
            restarted_at = time.monotonic()
            replicas.append(
                serve_on_kafka(
                    kafka_bootstrap,
                    prefix,
                    upstream,
                    victim.state_dir,
                    name="replica-a-again",
                    port=victim.port,
                )
            )
            back_at = time.monotonic()
            load.wait_acks(30, since=back_at)
            end = time.monotonic()
        result = load.result
        worker.wait_caught_up()
        report = consistency.check(kafka_log_factory(kafka_bootstrap, prefix), result, scenarios)
        fault_table.record(
            FaultRow(
                "SIGKILL of an API replica (2 on Kafka)",
                result.offered_rate(fault_at, end),
                result.acknowledged(),
                report.lost,
                report.duplicated,
                result.recovery_seconds(fault_at),
                f"client fail-overs {result.failovers}; killed replica back in "
                f"{back_at - restarted_at:.1f} s; errors {dict(result.errors)}",
            )
        )
        report.assert_ok()
        # the clients never saw the death: every request failed over to the survivor
        assert not result.errors, result.summary()
        assert result.failovers >= 1, "no request was in flight on, or sent to, the dead replica"
        assert survivor.managed.running(), survivor.output()
    finally:
        for replica in replicas:
            replica.stop()


def test_sigkill_of_a_stream_worker(
    kafka_bootstrap: str,
    kafka_prefix: Callable[[str], str],
    streams_worker: Callable[[str, str], StreamsWorker],
    upstream: UpstreamProcess,
    fault_table: FaultTable,
    tmp_path: Path,
) -> None:
    prefix = kafka_prefix(kafka_bootstrap)
    worker = streams_worker(kafka_bootstrap, prefix)
    worker.start()
    reef = serve_on_kafka(kafka_bootstrap, prefix, upstream, tmp_path / "state")
    try:
        scenarios = create_scenarios(reef.base_url, 3, "streams")
        worker.wait_ready()
        with SteadyLoad([reef.base_url], TOKEN, scenarios, rate=RATE) as load:
            load.wait_acks(20)
            fault_at = time.monotonic()
            worker.kill()
            load.wait_acks(20, since=fault_at)  # the API does not need the worker
            worker.start()
            ready_s = worker.wait_ready()
            ready_at = time.monotonic()
            load.wait_acks(20, since=time.monotonic())
            end = time.monotonic()
        result = load.result
        # The worker runs supervised, as a deployment must run it: any restart (an exit
        # or the probe on the lag) is recorded in the row's notes.
        caught_up_s = worker.wait_caught_up(timeout=120, supervised=True)
        report = consistency.check(kafka_log_factory(kafka_bootstrap, prefix), result, scenarios)
        fault_table.record(
            FaultRow(
                "SIGKILL of a stream worker (restarted)",
                result.offered_rate(fault_at, end),
                result.acknowledged(),
                report.lost,
                report.duplicated,
                ready_at - fault_at,
                f"kill -> restarted worker ready (Ready took {ready_s:.1f} s), caught up "
                f"{caught_up_s:.1f} s after the load; client errors {dict(result.errors)}; "
                f"worker crashes after restart: {worker.crashes or 'none'}",
            )
        )
        report.assert_ok()
        assert not result.errors, result.summary()
        assert report.samples >= len(result.reports)
        assert reef.managed.running(), reef.output()
    finally:
        reef.stop()
