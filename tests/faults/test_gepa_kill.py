"""SIGKILL of ``gepa``'s trainer mid-step: the archive and the step come back from the log.

The trainer and the chain run in one process (:mod:`tests.support.gepa_trainer`) over an
embedded log, the scripted models in-process. It is killed twice while a reflection is
under way (parent drawn, minibatch scored, nothing proposed) and started again each time:

1. the first step is redone: one release, consuming the first batch, carries the rule;
2. the second step, redone after the kill, draws the same parent (a draw keyed by the
   batch, over the archive folded again from the chain: the first release dominates the
   seed) and rejects the worse child; the chain stays one line.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from recipes.tasks import exact
from reef.artifacts import LocalArtifactStore, materialise
from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.events import (
    ReleaseCommitted,
    ReleaseProposed,
    SampleJoined,
    ScenarioCreated,
    utc_now,
)
from reef.core.ids import EMPTY_CONTENT_ID, derived_id, new_record_id, release_id
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.testing.harness_upstream import RULE, USELESS, agent_answer

pytestmark = pytest.mark.slow

SEED = "You are a careful assistant. Answer with one word."
REPO = Path(__file__).resolve().parents[2]


@contextmanager
def trainer(state: Path, run: str, stall: tuple[Path, str] | None = None) -> Iterator[Path]:
    """The trainer process for the block; yields its log file (it is SIGKILLed at the end)."""
    log = state.parent / f"{run}.log"
    argv = [sys.executable, "-m", "tests.support.gepa_trainer", str(state)]
    if stall is not None:
        argv += ["--stall", str(stall[0]), stall[1]]
    with log.open("w") as out:
        process = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield log
    finally:
        process.kill()  # SIGKILL: no cleanup of any kind
        process.wait(timeout=30)


async def until_file(path: Path, log: Path, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not path.exists():
            await asyncio.sleep(0.05)
    assert path.exists(), log.read_text()


@asynccontextmanager
async def opened(state: Path) -> AsyncIterator[EventStore]:
    log = EmbeddedLog(state / "log.sqlite3")
    await log.start()
    await log.ensure_topics(list(topics.ALL_TOPICS))
    try:
        yield EventStore(log)
    finally:
        await log.close()


async def releases(store: EventStore) -> list[ReleaseCommitted]:
    return [
        s.event
        async for s in store.read(topics.RELEASES)
        if isinstance(s.event, ReleaseCommitted) and s.event.scenario == "s"
    ]


async def head_after(store: EventStore, count: int, log: Path) -> list[ReleaseCommitted]:
    async with asyncio.timeout(60):
        while len(found := await releases(store)) < count:
            await asyncio.sleep(0.1)
    assert len(found) == count, log.read_text()
    return found


async def report(
    store: EventStore, served_by: str, system: str, tasks: list[tuple[str, str]]
) -> list[str]:
    ids = []
    for task, answer in tasks:
        output = agent_answer(system, task)
        turn = {
            "receipt": new_record_id(),
            "release_id": served_by,
            "route": "/v1/chat/completions",
            "request": {
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": task},
                ]
            },
            "response": {"choices": [{"message": {"role": "assistant", "content": output}}]},
        }
        ids.append(new_record_id())
        await store.append(
            SampleJoined(
                event_id=ids[-1],
                scenario="s",
                occurred_at=utc_now(),
                producer="reef-join",
                report_id=new_record_id(),
                references=[str(turn["receipt"])],
                trajectory_json=json.dumps([turn]),
                score=exact(output, answer),
                feedback_json="{}",
                metadata_json=json.dumps({"answer": answer}),
                release_ids=[served_by],
            )
        )
    return ids


async def seed_scenario(store: EventStore, content: ContentStore) -> str:
    creation = release_id("s", None, EMPTY_CONTENT_ID, "creation")
    await store.append(
        ScenarioCreated(
            event_id=derived_id("scenario", "s"),
            scenario="s",
            occurred_at=utc_now(),
            producer="test",
            recipe="gepa",
            initial_release_id=creation,
        )
    )
    seed = content.publish_files({"system_prompt.md": SEED + "\n"})
    await store.append(
        ReleaseProposed(
            event_id=new_record_id(),
            scenario="s",
            occurred_at=utc_now(),
            producer="admin",
            proposal_id=new_record_id(),
            content_id=seed,
            operation="training",
            parent_release_id=creation,
        )
    )
    return release_id("s", creation, seed, "training")


def parents(log: Path) -> list[tuple[str, str, int, int]]:
    """(parent content, served or archived, archive size, scored candidates) per step."""
    pattern = r"gepa s: parent (\S+) \((served|archived)\) of (\d+) candidates, (\d+) scored"
    return [(c, kind, int(n), int(k)) for c, kind, n, k in re.findall(pattern, log.read_text())]


async def test_a_trainer_killed_mid_reflection_redoes_the_step_from_the_log(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    content = ContentStore(LocalArtifactStore.in_state_dir(state))
    async with opened(state) as store:
        with trainer(state, "run1", stall=(tmp_path / "stall1", "Task: otter")) as log:
            head = await seed_scenario(store, content)
            await head_after(store, 2, log)
            batch1 = await report(
                store, head, SEED, [(f"Task: {w}", w[::-1]) for w in ("otter", "maple", "quartz")]
            )
            await until_file(tmp_path / "stall1", log)
        killed_first = parents(log)

        with trainer(state, "run2", stall=(tmp_path / "stall2", USELESS)) as log:
            first = (await head_after(store, 3, log))[-1]
            assert sorted(first.sample_ids) == sorted(batch1) and first.parent_release_id == head
            system = f"{SEED}\n{RULE}"
            worse = [
                (f"Task: cobalt {USELESS}", "tlaboc"),
                ("Task: pine", "enip"),
                ("Task: x", "?"),
            ]
            await report(store, first.release_id, system, worse)
            await until_file(tmp_path / "stall2", log)
        redone_first, killed_second = parents(log)[0], parents(log)[1]

        with trainer(state, "run3") as log:
            async with asyncio.timeout(60):
                while "child rejected" not in log.read_text():
                    await asyncio.sleep(0.1)
            redone_second = parents(log)[0]
        chain = await releases(store)

    # step 1: the killed attempt and the redone one drew the served seed (nothing scored:
    # the creation's empty harness and the seed)
    assert killed_first == [redone_first] and redone_first[1:] == ("served", 2, 0)
    # step 2: after the kill the archive is folded again from the chain (the seed scored
    # by the first gate's baseline, the release by its candidate evaluation): same draw
    assert killed_second == redone_second == (first.content_id, "served", 3, 2)
    assert len(chain) == 3 and [r.pending for r in chain] == [False, False, False]
    folder = materialise(content.store, content.load(first.content_id), tmp_path / "first")
    assert (folder / "system_prompt.md").read_text() == f"{SEED}\n{RULE}\n"
