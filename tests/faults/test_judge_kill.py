"""SIGKILL of ``reef judge`` mid-judgement on Kafka: every turn judged once, none lost.

Sealed exchanges and their ``TurnCompleted`` are appended to a fresh topic prefix (as
the API and ``reef streams`` write them). The judge model is the scripted judge
stand-in (reef/testing/judge_upstream.py, on loopback), which holds the first request
about one turn open: the judge appends the judgements of the turns after it but cannot
commit past it, and is SIGKILLed there. The restarted judge re-reads those turns, skips
the ones already judged, judges the held one; ``reef.judgements`` ends with exactly one
record per turn (by event id and by count).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reef.core import topics
from reef.core.events import TurnCompleted, TurnJudged
from reef.crypto.rings import open_keyring
from reef.log.kafka import KafkaLog, delete_prefixed_topics
from reef.services.eventstore import EventStore
from reef.services.judge import judgement_id
from reef.testing.servers import (
    ManagedProcess,
    UpstreamProcess,
    clean_env,
    reef_executable,
    running_upstream,
    spawn,
)
from tests.support.faults import FaultRow, FaultTable, kafka_flags
from tests.support.judging import session

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SCENARIO = "judge-kill"
HANGS = "__judge_hangs__ no, try again"
NEXT_STATES = [HANGS, "thanks", "no, wrong", "hmm", "thanks a lot", "no, not that"]
AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def prefix(kafka_bootstrap: str) -> AsyncIterator[str]:
    name = f"t-judge-{uuid.uuid4().hex[:10]}-"
    yield name
    await delete_prefixed_topics(kafka_bootstrap, name)


async def record_turns(bootstrap: str, prefix: str) -> list[TurnCompleted]:
    log = KafkaLog(bootstrap, topic_prefix=prefix, client_id="reef-test-judge")
    await log.start()
    try:
        await log.ensure_topics(list(topics.LOG_TOPICS))
        keys = open_keyring(log)
        await keys.start()
        store = EventStore(log, keys=keys)
        turns = []
        for n, text in enumerate(NEXT_STATES):
            exchanges, turn = session(SCENARIO, n, text, AT)
            await store.append_all(exchanges)  # sealed, keys in the same batch
            turns.append(turn)
        await store.append_all(turns)
        await keys.close()
        return turns
    finally:
        await log.close()


async def read_judgements(bootstrap: str, prefix: str) -> tuple[list[TurnJudged], bool]:
    """Every judgement record, and whether the group committed all of reef.turns."""
    log = KafkaLog(bootstrap, topic_prefix=prefix, client_id="reef-test-judge-read")
    await log.start()
    try:
        found = [
            s.event
            async for s in EventStore(log).read(topics.JUDGEMENTS)
            if isinstance(s.event, TurnJudged)
        ]
        ends = await log.end_offsets(topics.TURNS)
        committed = await log.committed("judge", topics.TURNS)
        return found, all(committed.get(p, 0) >= end for p, end in ends.items())
    finally:
        await log.close()


def start_judge(
    bootstrap: str, prefix: str, judge: UpstreamProcess, logs: Path, name: str
) -> ManagedProcess:
    argv = [
        reef_executable(),
        "judge",
        *kafka_flags(bootstrap, prefix),
        "--judge-url",
        judge.v1_url,
        "--status-every",
        "1",
    ]
    return spawn(argv, env=clean_env({"REEF_JUDGE_TIMEOUT_S": "60"}), log_dir=logs, name=name)


def wait_until(what: str, check: object, process: ManagedProcess, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert process.running(), process.output()
        assert time.monotonic() < deadline, f"{what} within {timeout} s\n{process.output()}"
        time.sleep(0.1)


def test_sigkill_of_the_judge_mid_judgement_judges_every_turn_once(
    kafka_bootstrap: str, prefix: str, fault_table: FaultTable, tmp_path: Path
) -> None:
    turns = asyncio.run(record_turns(kafka_bootstrap, prefix))
    held = turns[0]
    others = {judgement_id(t.event_id) for t in turns[1:]}

    def judged() -> list[TurnJudged]:
        return asyncio.run(read_judgements(kafka_bootstrap, prefix))[0]

    with running_upstream(tmp_path / "upstream", "reef.testing.judge_upstream") as judge_model:
        first = start_judge(kafka_bootstrap, prefix, judge_model, tmp_path / "logs", "judge-0")
        try:
            wait_until(
                "the held turn asked", lambda: judge_model.requests("__judge_hangs__"), first
            )
            wait_until(
                "the other turns judged", lambda: {j.event_id for j in judged()} >= others, first
            )
            first.process.kill()  # SIGKILL, mid-judgement of the held turn
            first.process.wait(10)
            killed_at = time.monotonic()
            second = start_judge(kafka_bootstrap, prefix, judge_model, tmp_path / "logs", "judge-1")
            try:
                wait_until(
                    "every turn judged and committed",
                    lambda: asyncio.run(read_judgements(kafka_bootstrap, prefix))[1],
                    second,
                )
                recovered_s = time.monotonic() - killed_at
                restarted_log = second.output()
            finally:
                second.stop()
        finally:
            first.stop()
    records = judged()
    ids = [j.event_id for j in records]
    fault_table.record(
        FaultRow(
            "SIGKILL of reef judge mid-judgement (Kafka)",
            0.0,
            len(turns),
            len({judgement_id(t.event_id) for t in turns} - set(ids)),
            len(ids) - len(set(ids)),
            recovered_s,
            f"{len(turns)} turns, {len(records)} judgement records; "
            "recovery = kill -> every turn committed",
        )
    )
    assert sorted(ids) == sorted(judgement_id(t.event_id) for t in turns)  # once each, none lost
    by_turn = {j.turn_id: j for j in records}
    assert by_turn[held.event_id].score == -1 and not by_turn[held.event_id].failed
    assert [by_turn[t.event_id].score for t in turns[1:]] == [1, -1, 0, 1, -1]
    # the judgements appended behind the held turn were found, not made again
    assert f"({len(turns) - 1} judgements since the last commit)" in restarted_log
