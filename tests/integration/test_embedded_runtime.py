"""EmbeddedRuntime over a real EmbeddedLog (SQLite in tmp_path).

* outputs appear while the runtime follows the log;
* a new runtime resumes from the stored positions: nothing is processed or emitted twice;
* SIGKILL of a process running the runtime (at random moments, and exactly inside and
  just after the commit transaction) leaves state, outputs and positions consistent:
  after a restart the samples are exactly the expected ones, with no duplicates;
* the replayed state's digests equal the live state's after a mixed workload.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reef.catalog import processors
from reef.core import topics
from reef.core.events import (
    Event,
    ReleaseCommitted,
    ReleaseProposed,
    ReleaseRejected,
    ScenarioCreated,
)
from reef.core.ids import EMPTY_CONTENT_ID, derived_id, release_id
from reef.core.state import DictState
from reef.hosts import embedded as embedded_host
from reef.hosts.embedded import EmbeddedRuntime, _create_state_table
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.services.replay import live_digests, replay, state_digest
from reef_dev.events import receipt, report
from tests.support.embedded_join import (
    at,
    check_consistent,
    check_fates,
    join_runtime,
    join_workload,
    read_events,
    settings_for,
    settle,
    stored_state,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
# ---------------------------------------------------------------------------
# Outputs appear; restarts resume


async def test_outputs_appear_while_following_the_log(log: EmbeddedLog, tmp_path: Path) -> None:
    store = EventStore(log)
    runtime = join_runtime(log, tmp_path, batch_size=50)
    await runtime.start()
    try:
        workload = join_workload(120)
        # appended in several steps while the runtime runs
        for start in range(0, len(workload.events), 37):
            await store.append_all(workload.events[start : start + 37])
            await asyncio.sleep(0.005)
        await settle(runtime)
        assert runtime.healthy()
        assert runtime.processed == len(workload.events)
        assert await runtime.lag() == {topics.INFERENCE: 0, topics.REPORTS: 0}
    finally:
        await runtime.close()
    check_fates(await read_events(log, topics.SAMPLES), workload)
    await check_consistent(log, tmp_path)


async def test_chain_outputs_appear(log: EmbeddedLog, tmp_path: Path) -> None:
    store = EventStore(log)
    (chain,) = [p for p in processors(settings_for(tmp_path)) if p.name == "chain"]
    runtime = EmbeddedRuntime(log, chain)
    await runtime.start()
    try:
        root = release_id("demo", None, EMPTY_CONTENT_ID, "creation")
        await store.append(
            ScenarioCreated(
                event_id=derived_id("scenario", "demo"),
                scenario="demo",
                occurred_at=at(0),
                producer="t",
                recipe="core",
                initial_release_id=root,
            )
        )
        racers = [
            ReleaseProposed(
                event_id=f"ev-{i}",
                scenario="demo",
                occurred_at=at(1),
                producer="t",
                proposal_id=f"p{i}",
                content_id=f"c{i}",
                operation="training",
                parent_release_id=root,
            )
            for i in range(8)
        ]
        await store.append_all(racers)
        await settle(runtime)
    finally:
        await runtime.close()
    out = await read_events(log, topics.RELEASES)
    commits = [o for o in out if isinstance(o, ReleaseCommitted)]
    rejects = [o for o in out if isinstance(o, ReleaseRejected)]
    assert [c.operation for c in commits] == ["creation", "training"]
    assert commits[1].proposal_id == "p0"
    assert sorted(r.reason for r in rejects) == ["stale_parent"] * 7


async def test_a_new_runtime_resumes_from_the_stored_positions(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    store = EventStore(log)
    workload = join_workload(90)
    half = len(workload.events) // 2
    first = join_runtime(log, tmp_path, batch_size=16)
    await store.append_all(workload.events[:half])
    await first.start()
    await settle(first)
    await first.close()
    after_first = await read_events(log, topics.SAMPLES)
    assert first.processed == half

    await store.append_all(workload.events[half:])
    second = join_runtime(log, tmp_path, batch_size=16)
    await second.start()
    try:
        # it starts from the stored state, not from scratch: every stored key reads back
        stored = await stored_state(log, "join")
        assert stored
        assert {key: second.state.get(key) for key in stored} == stored
        await settle(second)
    finally:
        await second.close()
    assert second.processed == len(workload.events) - half  # nothing read twice
    outputs = await read_events(log, topics.SAMPLES)
    assert {o.event_id for o in after_first} < {o.event_id for o in outputs}
    check_fates(outputs, workload)
    await check_consistent(log, tmp_path)

    # a third start with nothing new does nothing
    third = join_runtime(log, tmp_path)
    await third.start()
    await asyncio.sleep(0.1)
    await third.close()
    assert third.processed == 0
    assert await read_events(log, topics.SAMPLES) == outputs


async def test_a_failed_commit_applies_nothing_and_the_batch_is_redone(
    log: EmbeddedLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction that fails after writing state rows leaves no trace, in memory either."""
    store = EventStore(log)
    workload = join_workload(30)
    await store.append_all(workload.events)
    runtime = join_runtime(log, tmp_path, batch_size=10)
    runtime.positions = {t: {} for t in runtime.processor.inputs}
    await log.transact([], _create_state_table)
    original = EmbeddedRuntime._persist

    def failing(self: EmbeddedRuntime, db: sqlite3.Connection, *args: object) -> None:
        original(self, db, *args)  # type: ignore[arg-type]
        raise sqlite3.OperationalError("disk I/O error (injected)")

    monkeypatch.setattr(EmbeddedRuntime, "_persist", failing)
    with pytest.raises(Exception, match="injected"):
        await runtime._step_batch()
    assert runtime.state.cached() == {}  # nothing of the failed batch in memory either
    assert runtime.processed == 0
    assert await stored_state(log, "join") == {}
    assert await read_events(log, topics.SAMPLES) == []
    assert await log.committed("processor:join", topics.REPORTS) == {}

    monkeypatch.setattr(EmbeddedRuntime, "_persist", original)
    await runtime.run_until_idle()
    check_fates(await read_events(log, topics.SAMPLES), workload)
    await check_consistent(log, tmp_path)


# ---------------------------------------------------------------------------
# SIGKILL

CHILD = r"""
import asyncio, os, signal, sys, time
from pathlib import Path

from reef.log.embedded import EmbeddedLog
from reef.catalog import processors
from reef.hosts.embedded import EmbeddedRuntime
from reef.settings import Settings

path, batch, delay, crash = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]


async def main() -> None:
    log = EmbeddedLog(path)
    await log.start()
    (join,) = [p for p in processors(Settings.of(state_dir=path.parent)) if p.name == "join"]
    step = join.step

    def slow_step(state, event):
        time.sleep(delay)  # a slower processor: the kill lands inside a batch more often
        return step(state, event)

    join.step = slow_step
    runtime = EmbeddedRuntime(log, join, batch_size=batch)
    print("started", flush=True)
    await runtime.start()  # its task runs from our next await: patch it before that
    batches = 0
    persist, transact = runtime._persist, log.transact

    def persist_then_die(db, changes, positions):
        persist(db, changes, positions)  # state rows and positions written, not committed
        if batches == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    async def counted(records, work):
        nonlocal batches
        batches += 1
        positions = await transact(records, work)
        if batches == 2 and crash == "after-commit":
            os.kill(os.getpid(), signal.SIGKILL)  # committed, not yet applied in memory
        return positions

    log.transact = counted
    if crash == "in-transaction":
        runtime._persist = persist_then_die
    while sum((await runtime.lag()).values()) > 0:
        await asyncio.sleep(0.01)
    await runtime.close()
    await log.close()
    print("idle", flush=True)


asyncio.run(main())
"""


def progress(path: Path) -> int:
    """Input records the join has committed as processed (read-only, another process)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30) as db:
        try:
            (done,) = db.execute(
                "SELECT COALESCE(SUM(next_offset), 0) FROM consumer_offsets WHERE grp = ?",
                ("processor:join",),
            ).fetchone()
        except sqlite3.OperationalError:
            return 0
    return int(done)


def spawn_child(path: Path, *, batch: int, delay: float, crash: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(batch), str(delay), crash],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def finish(child: subprocess.Popen[bytes], timeout: float = 60.0) -> tuple[int, str]:
    out, _ = child.communicate(timeout=timeout)
    return child.returncode, out.decode(errors="replace")


@pytest.mark.slow
async def test_sigkill_at_random_moments_leaves_everything_consistent(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    path = tmp_path / "log.sqlite3"
    workload = join_workload(600)
    await EventStore(log).append_all(workload.events)
    total = len(workload.events)
    rng = random.Random(7)
    kills = 0
    seen = []
    while kills < 6:
        before = progress(path)
        child = spawn_child(path, batch=40, delay=0.0004, crash="none")
        # wait until it is processing (positions moving), then kill it at a random moment
        deadline = time.monotonic() + 30
        while progress(path) == before and child.poll() is None:
            assert time.monotonic() < deadline, "the child made no progress"
            await asyncio.sleep(0.01)
        await asyncio.sleep(rng.uniform(0.0, 0.25))
        if child.poll() is not None:
            break  # it finished the whole log first
        child.send_signal(signal.SIGKILL)
        code, output = finish(child)
        assert code == -signal.SIGKILL, output
        kills += 1
        seen.append(progress(path))
    print(f"SIGKILLs: {kills}; processed inputs after each: {seen} of {total}")
    assert kills >= 5, f"only {kills} kills landed before the log was processed ({seen})"
    assert seen[-1] < total
    # whatever the kills left, the outputs so far carry no duplicate
    partial = await read_events(log, topics.SAMPLES)
    assert len({o.event_id for o in partial}) == len(partial)

    child = spawn_child(path, batch=40, delay=0.0, crash="none")
    code, output = finish(child)
    assert code == 0 and "idle" in output, output
    check_fates(await read_events(log, topics.SAMPLES), workload)
    await check_consistent(log, tmp_path)


@pytest.mark.parametrize("crash", ["in-transaction", "after-commit"])
async def test_sigkill_inside_and_right_after_the_commit(
    log: EmbeddedLog, tmp_path: Path, crash: str
) -> None:
    path = tmp_path / "log.sqlite3"
    workload = join_workload(60)
    await EventStore(log).append_all(workload.events)
    child = spawn_child(path, batch=20, delay=0.0, crash=crash)
    code, output = finish(child)
    assert code == -signal.SIGKILL, output
    done = progress(path)
    outputs = await read_events(log, topics.SAMPLES)
    state = await stored_state(log, "join")
    # batch 1 committed; batch 2 did not (in-transaction) or did (after-commit)
    assert 0 < done < len(workload.events)
    # state and outputs are exactly those of the inputs the stored positions cover
    covered, expected = await _inputs_covered(log, tmp_path)
    assert state_digest(state) == state_digest(covered.data)
    assert sorted(o.event_id for o in outputs) == sorted(o.event_id for o in expected)

    child = spawn_child(path, batch=20, delay=0.0, crash="none")
    code, output = finish(child)
    assert code == 0, output
    check_fates(await read_events(log, topics.SAMPLES), workload)
    await check_consistent(log, tmp_path)


async def _inputs_covered(log: EmbeddedLog, tmp_path: Path) -> tuple[DictState, list[Event]]:
    """The join's state and outputs after exactly the inputs below the stored positions."""
    (join,) = [p for p in processors(settings_for(tmp_path)) if p.name == "join"]
    store = EventStore(log)
    records = []
    for topic in join.inputs:
        done = await log.committed("processor:join", topic)
        records += [r async for r in log.read(topic) if r.offset < done.get(r.partition, 0)]
    order = {t: i for i, t in enumerate(join.inputs)}
    records.sort(key=lambda r: (r.partition, r.timestamp_ms, order[r.topic], r.offset))
    state = DictState()
    outputs: list[Event] = []
    for record in records:
        event = store.decode(record).event
        assert event is not None
        outputs += join.step(state, event)
    return state, outputs


# ---------------------------------------------------------------------------
# Replay equals live


async def test_replay_digests_equal_live_after_a_mixed_workload(
    log: EmbeddedLog, tmp_path: Path
) -> None:
    settings = settings_for(tmp_path)
    store = EventStore(log)
    runtimes = [EmbeddedRuntime(log, p, batch_size=25) for p in processors(settings)]
    for runtime in runtimes:
        await runtime.start()
    try:
        workload = join_workload(150, scenarios=("m1", "m2"))
        roots = {s: release_id(s, None, EMPTY_CONTENT_ID, "creation") for s in ("m1", "m2")}
        for s, root in roots.items():
            await store.append(
                ScenarioCreated(
                    event_id=derived_id("scenario", s),
                    scenario=s,
                    occurred_at=at(0),
                    producer="t",
                    recipe="core",
                    initial_release_id=root,
                )
            )
        heads = dict(roots)
        rng = random.Random(3)
        chunks = [workload.events[i : i + 23] for i in range(0, len(workload.events), 23)]
        for n, chunk in enumerate(chunks):
            await store.append_all(chunk)
            # a round of racing proposals per chunk: some on the head, some stale
            for s in ("m1", "m2"):
                racers = [
                    ReleaseProposed(
                        event_id=f"ev-{s}-{n}-{k}",
                        scenario=s,
                        occurred_at=at(n),
                        producer="t",
                        proposal_id=f"{s}-{n}-{k}",
                        content_id=f"c-{n}-{k}",
                        operation="training",
                        parent_release_id=heads[s] if k else roots[s],
                        sample_ids=[f"sample-{n}-{k}"],
                        pending=rng.random() < 0.2,
                    )
                    for k in range(3)
                ]
                await store.append_all(racers)
            # the runtimes follow while appends go on; now and then they catch up
            await asyncio.sleep(rng.choice([0, 0, 0.003, 0.02]))
            for o in await read_events(log, topics.RELEASES):
                if isinstance(o, ReleaseCommitted) and not o.pending:
                    heads[o.scenario] = o.release_id
        # a far-future report expires nothing (default park timeout) but is decided
        await store.append(report("m1", "last", [receipt("m1", 10_000)], at(100_000)))
        for runtime in runtimes:
            await settle(runtime)
    finally:
        for runtime in runtimes:
            await runtime.close()
    result = await replay(processors(settings), log)
    replayed = result.digests()
    live = await live_digests(processors(settings), log, embedded_host.durable_tables)
    assert set(live) == {"join", "chain"}
    assert live == {name: replayed[name] for name in live}
    commits = [
        o for o in await read_events(log, topics.RELEASES) if isinstance(o, ReleaseCommitted)
    ]
    assert len(commits) > 2 + len(chunks)  # creation + at least one commit per round
