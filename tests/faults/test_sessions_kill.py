"""SIGKILL of ``reef streams`` hosting the session processor, under agents' sessions.

``reef serve --log kafka`` and ``reef streams`` track sessions (``REEF_TRACK_SESSIONS``,
a short ``REEF_SESSION_TTL_S`` so that sessions expire while the load runs). Agents run
multi-turn sessions through the API (tagged and untagged, with identical resends and
side calls: :class:`tests.support.sessions.SessionLoad`). The worker is SIGKILLed twice
at random points (the second while it works off the backlog of the first death) and
restarted each time. Once it has caught up, read_committed:

* every turn the agents made is completed exactly once (the ids the known session
  structure implies, no duplicate, none missing) and the pure processor run over the
  committed ``reef.inference`` yields exactly the same ``TurnCompleted`` and
  ``SessionExpired`` records, each once (an expiry at most once);
* the worker's changelog table equals the replayed state (digests).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from reef.catalog import session_settings
from reef.core import topics
from reef.core.events import Event, SessionExpired, TurnCompleted
from reef.core.sessions import SessionProcessor
from reef.core.state import DictState
from reef.services.eventstore import EventStore
from reef.services.replay import ordered_events, state_digest
from reef.settings import Settings
from reef.testing.servers import ReefProcess, UpstreamProcess
from streams.changelog import changelog_table, changelog_topic
from tests.support.faults import (
    TOKEN,
    FaultRow,
    FaultTable,
    StreamsWorker,
    create_scenarios,
    kafka_log_factory,
    serve_on_kafka,
)
from tests.support.sessions import AgentSession, SessionLoad

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TTL_S = 12.0
SESSIONS_ENV = {"REEF_TRACK_SESSIONS": "true", "REEF_SESSION_TTL_S": f"{TTL_S:g}"}


def serve_kafka(
    bootstrap: str, prefix: str, upstream: UpstreamProcess, state_dir: Path
) -> ReefProcess:
    env = {**SESSIONS_ENV, "REEF_FINGERPRINT_SECRET": "kill-test-secret"}
    return serve_on_kafka(bootstrap, prefix, upstream, state_dir, name="reef-sessions", env=env)


async def committed_outcome(
    bootstrap: str, prefix: str
) -> tuple[list[Event], list[Event], str, str]:
    """(outputs on reef.turns read_committed, the pure processor's outputs over the
    committed reef.inference, the changelog table's digest, the replayed state's)."""
    log = kafka_log_factory(bootstrap, prefix)()
    await log.start()
    try:
        store = EventStore(log)
        written = [s.event async for s in store.read(topics.TURNS) if s.event is not None]
        settings = Settings.of(log="kafka", track_sessions=True, session_ttl_s=TTL_S)
        processor = SessionProcessor(session_settings(settings))
        oracle: list[Event] = []
        replayed = DictState()
        for event in await ordered_events(store, processor.inputs):
            oracle += processor.step(replayed, event)
        live = await changelog_table(log, processor.name)
        return written, oracle, state_digest(live), state_digest(replayed.data)
    finally:
        await log.close()


async def aborted_records(bootstrap: str, prefix: str) -> int:
    """Records of reef.turns and of the sessions changelog that a read_uncommitted reader
    sees and a read_committed one does not: what the transactions the kills aborted had
    sent (how often a kill landed mid-transaction; reported, not asserted: a kill may
    fall between two transactions)."""
    log = kafka_log_factory(bootstrap, prefix)()
    await log.start()
    try:
        names = [topics.TURNS, changelog_topic(topics.STREAMS_APP_ID, "sessions")]
        parts = [
            TopicPartition(prefix + name, p) for name in names for p in await log.end_offsets(name)
        ]
    finally:
        await log.close()
    seen = [
        await _count(bootstrap, parts, isolation)
        for isolation in ("read_uncommitted", "read_committed")
    ]
    return seen[0] - seen[1]


async def _count(bootstrap: str, parts: list[TopicPartition], isolation: str) -> int:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        seen, deadline = 0, time.monotonic() + 30
        while any([await consumer.position(p) < ends[p] for p in parts]):
            assert time.monotonic() < deadline, f"{isolation}: topics not read in 30 s"
            batches = await consumer.getmany(*parts, timeout_ms=500)
            seen += sum(len(records) for records in batches.values())
        return seen
    finally:
        await consumer.stop()


def duplicated(events: Sequence[Event]) -> dict[str, int]:
    return {i: n for i, n in Counter(e.event_id for e in events).items() if n > 1}


def check_structure(written: list[Event], sessions: list[AgentSession]) -> None:
    completed = [e for e in written if isinstance(e, TurnCompleted)]
    expected = set().union(*(s.expected_turns() for s in sessions))
    found = {e.event_id for e in completed}
    assert not duplicated(completed), f"turns completed twice: {duplicated(completed)}"
    assert found == expected, (
        f"{len(expected - found)} turns missing, {len(found - expected)} unexpected"
    )
    last_turns = {s.turns[-1] for s in sessions if s.turns}
    expiries = [e for e in written if isinstance(e, SessionExpired)]
    ended = {sid: n for sid, n in Counter(e.session_id for e in expiries).items() if n > 1}
    assert not ended, f"sessions expired more than once: {ended}"
    for expired in expiries:
        assert expired.last_receipt_id in last_turns, f"{expired} ends a session mid-way"


def test_sigkill_of_the_stream_worker_completes_every_turn_once(
    kafka_bootstrap: str,
    kafka_prefix: Callable[[str], str],
    streams_worker: Callable[[str, str], StreamsWorker],
    upstream: UpstreamProcess,
    fault_table: FaultTable,
    tmp_path: Path,
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    prefix = kafka_prefix(kafka_bootstrap)
    worker = streams_worker(kafka_bootstrap, prefix)
    worker.env.update(SESSIONS_ENV)
    worker.start()
    reef = serve_kafka(kafka_bootstrap, prefix, upstream, tmp_path / "state")
    try:
        scenarios = create_scenarios(reef.base_url, 2, "sessions")
        worker.wait_ready()
        began = time.monotonic()
        with SessionLoad(reef.base_url, TOKEN, scenarios, seed=seed) as load:
            load.wait_acks(rng.randint(30, 90))
            worker.kill()  # 1: while it keeps up with the load
            load.wait_acks(rng.randint(20, 60))  # the API does not need the worker
            worker.start()
            ready_s = [worker.wait_ready()]
            time.sleep(rng.uniform(0.0, 1.5))
            worker.kill()  # 2: while it works off the backlog (or just after)
            load.wait_acks(rng.randint(10, 40))
            worker.start()
            ready_s.append(worker.wait_ready())
            load.wait_acks(rng.randint(30, 60))
            while time.monotonic() - began < TTL_S + 5:  # the first sessions expire
                load.wait_acks(1)
        loaded_s = time.monotonic() - began
        caught_up_s = worker.wait_caught_up(timeout=120, supervised=True)
        assert not load.errors, f"client errors {dict(load.errors)}"
        written, oracle, live, replayed = asyncio.run(committed_outcome(kafka_bootstrap, prefix))
        aborted = asyncio.run(aborted_records(kafka_bootstrap, prefix))
        turns = sum(len(s.turns) for s in load.sessions)
        expired = [e for e in written if isinstance(e, SessionExpired)]
        expected = set().union(*(s.expected_turns() for s in load.sessions))
        fault_table.record(
            FaultRow(
                "SIGKILL x2 of reef streams hosting sessions",
                load.acknowledged / loaded_s,
                load.acknowledged,
                len(expected - {e.event_id for e in written}),
                sum(n - 1 for n in duplicated(written).values()),
                caught_up_s,
                f"seed {seed}; {len(load.sessions)} sessions, {turns} turns, "
                f"{sum(len(s.retries) for s in load.sessions)} resends, "
                f"{sum(len(s.sides) for s in load.sessions)} side calls; "
                f"{len(written) - len(expired)} TurnCompleted, {len(expired)} SessionExpired; "
                f"restarts ready in {', '.join(f'{s:.1f}' for s in ready_s)} s; "
                f"{aborted} aborted records (turns + changelog, read_uncommitted only); "
                f"worker crashes: {worker.crashes or 'none'}",
            )
        )
        assert not duplicated(written), f"outputs committed twice: {duplicated(written)}"
        check_structure(written, load.sessions)
        assert sorted(e.event_id for e in written) == sorted(e.event_id for e in oracle)
        assert expired, f"no session expired (TTL {TTL_S:g} s): the test lost its point"
        assert live == replayed, "the changelog table differs from the replayed state"
        assert reef.managed.running(), reef.output()
    finally:
        reef.stop()
