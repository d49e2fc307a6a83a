"""The judge service on a real embedded log, its judge model an ``httpx.MockTransport``
answering by the scripted judge's rules (reef.testing.judge_upstream): the decisions,
a failed judgement's reason, and the commit order that makes a turn judged once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from reef.core import topics
from reef.core.events import Event, TurnCompleted, TurnJudged
from reef.services.eventstore import EventStore
from reef.services.judge import Judge, first_judgements, judgement_id
from reef.services.judge_client import JudgeClient, JudgeConfig
from reef.testing.judge_upstream import evaluative_answer, hint_answer, next_state
from tests.support.judging import judged_store, session

AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SCENARIO = "judged"


def scripted_judge(request: httpx.Request) -> httpx.Response:
    """The scripted judge's rules, in-process (a stand-in: no model)."""
    messages = json.loads(request.content)["messages"]
    state = next_state(messages)
    if "__judge_fails__" in state:
        return httpx.Response(500, json={"error": {"message": "scripted judge failure"}})
    hint = "hindsight hint" in messages[0]["content"]
    text = hint_answer(state) if hint else evaluative_answer(state, 0)
    return httpx.Response(200, json={"choices": [{"message": {"content": text}}]})


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    async with judged_store(tmp_path) as opened:
        yield opened


def judge(store: EventStore, *, hints: bool = False) -> Judge:
    config = JudgeConfig(url="http://judge.test/v1", model="j", producer="test", hints=hints)
    client = JudgeClient(config, transport=httpx.MockTransport(scripted_judge))
    return Judge(store, client, config)


async def record(store: EventStore, next_texts: list[str]) -> list[TurnCompleted]:
    turns = []
    for n, text in enumerate(next_texts):
        exchanges, turn = session(SCENARIO, n, text, AT)
        await store.append_all(exchanges)  # sealed by the store, as the API does
        turns.append(turn)
    await store.append_all(turns)
    return turns


async def judged(store: EventStore) -> list[TurnJudged]:
    return [s.event async for s in store.read(topics.JUDGEMENTS) if isinstance(s.event, TurnJudged)]


async def run_until(worker: Judge, store: EventStore, count: int) -> list[TurnJudged]:
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):
            while worker.counts["turns_read"] < count:
                assert not task.done(), task.exception()
                await asyncio.sleep(0.02)
        return await judged(store)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_turns_are_judged_by_plurality_and_a_failure_keeps_its_reason(
    store: EventStore,
) -> None:
    texts = ["thanks, that works", "no, it is 4", "hmm", "__judge_fails__ no,"]
    turns = await record(store, texts)
    worker = judge(store, hints=True)
    found = {j.turn_id: j for j in await run_until(worker, store, len(turns))}
    scores = [found[t.event_id].score for t in turns]
    assert scores == [1, -1, 0, 0]
    assert found[turns[0].event_id].votes == [1, 1, 1]
    assert found[turns[1].event_id].hints == ["The user said: no, it is 4"]
    # as stored, the hint (it quotes the user) is sealed: erasing a record shreds it
    stored = [s.event async for s in store.read(topics.JUDGEMENTS, raw=True)]
    (hinted,) = [j for j in stored if isinstance(j, TurnJudged) and j.hints_sealed]
    assert hinted.turn_id == turns[1].event_id and hinted.hints == []
    assert all(not j.hints for j in stored if isinstance(j, TurnJudged))
    failed = found[turns[3].event_id]
    assert failed.failed and failed.invalid_votes == 3
    assert failed.failed_reason is not None and "HTTP 500" in failed.failed_reason
    assert all(j.event_id == judgement_id(j.turn_id) for j in found.values())
    assert worker.counts["failed"] == 1
    await worker.client.aclose()


async def test_an_erased_exchange_fails_its_judgement(store: EventStore) -> None:
    (turn,) = await record(store, ["thanks"])
    await store.erase(SCENARIO, turn.receipt_id, producer="test")
    worker = judge(store)
    (found,) = await run_until(worker, store, 1)
    assert found.failed_reason == f"exchange {turn.receipt_id} was erased"
    await worker.client.aclose()


async def test_a_restart_after_appending_before_committing_judges_nothing_twice(
    store: EventStore,
) -> None:
    turns = await record(store, ["thanks", "no, wrong"])
    first = judge(store)
    # the crash window: a judgement appended, the offsets never committed
    await store.append(await first.judge(turns[0]))
    assert await store.log.committed("judge", topics.TURNS) == {}
    second = judge(store)
    found = await run_until(second, store, 2)
    assert sorted(j.turn_id for j in found) == sorted(t.event_id for t in turns)
    assert second.counts["skipped_judged"] == 1
    # and once committed, a third judge starts past both turns and judges nothing
    third = judge(store)
    task = asyncio.create_task(third.run())
    await asyncio.sleep(0.3)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert third.counts["judged"] == 0 and len(await judged(store)) == 2
    for worker in (first, second, third):
        await worker.client.aclose()


def test_readers_keep_the_first_judgement_per_id() -> None:
    base = dict(
        scenario=SCENARIO,
        occurred_at=AT,
        producer="test",
        session_id="s",
        turn_index=0,
        receipt_id="r1",
        next_receipt_id="r2",
        release_id="rel",
        judge_model="j",
    )
    one = TurnJudged(event_id="a", turn_id="t1", score=1, **base)  # type: ignore[arg-type]
    again = TurnJudged(event_id="a", turn_id="t1", score=-1, **base)  # type: ignore[arg-type]
    other = TurnJudged(event_id="b", turn_id="t2", score=0, **base)  # type: ignore[arg-type]
    events: list[Event] = [one, again, other]
    assert first_judgements(events) == [one, other]


def test_the_judge_imports_without_torch() -> None:
    check = (
        "import sys, reef.cli.judge, reef.services.judge, reef.testing.judge_upstream\n"
        "print(','.join(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == ""
