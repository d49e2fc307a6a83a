"""The trainer's sample intake (trainers/intake.py) on its own: over the embedded log and
the real release chain, with no trainer loop and no Kafka. A sample is admitted, held
until the chain commits the release that served it, or skipped with its reason; the
group's committed offset never passes a sample that is not decided yet."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from recipes.registry import build_recipe
from reef.core.chain import ReleaseChainProcessor
from reef.core.events import ReleaseProposed, utc_now
from reef.core.ids import new_record_id
from reef.core.topics import SAMPLES
from reef.hosts.embedded import EmbeddedRuntime
from tests.support.trainer_harness import FAKE, Harness
from trainers.batcher import Batcher
from trainers.chainview import ChainFollower
from trainers.config import TrainerConfig
from trainers.intake import SampleIntake
from trainers.progress import Progress

GROUP = f"trainer:{FAKE}"


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def intake_for(
    harness: Harness,
    config: dict[str, Any],
    *,
    release_wait_s: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
) -> SampleIntake:
    recipe = build_recipe(FAKE, config)
    trainer = TrainerConfig(FAKE, "test", harness.tmp / "trainer", release_wait_s=release_wait_s)
    return SampleIntake(
        recipe,
        harness.store,
        ChainFollower(harness.store),
        Batcher(recipe.config.batching),
        Progress(FAKE, trainer.group),
        trainer,
        clock=clock,
    )


async def read(intake: SampleIntake, count: int) -> None:
    """Start the intake at the group's committed offsets and ingest the next ``count``
    records it reads."""
    await intake.start()
    reader = asyncio.create_task(intake.follow())
    try:
        for _ in range(count):
            record = await intake.next(10.0)
            assert record is not None, "the intake read fewer records than were appended"
            await intake.ingest(record)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


async def position(harness: Harness, sample_id: str) -> tuple[int, int]:
    """(partition, offset) of the sample on ``reef.samples``."""
    async for stored in harness.store.read(SAMPLES):
        if stored.event is not None and stored.event.event_id == sample_id:
            return stored.record.partition, stored.record.offset
    raise AssertionError(f"sample {sample_id} is not on {SAMPLES}")


async def committed_offset(harness: Harness, partition: int) -> int:
    return (await harness.log.committed(GROUP, SAMPLES)).get(partition, 0)


async def consume(harness: Harness, scenario: str, parent: str, sample_ids: list[str]) -> None:
    """Another writer's release that consumes ``sample_ids`` (the chain commits it)."""
    await harness.store.append(
        ReleaseProposed(
            event_id=new_record_id(),
            scenario=scenario,
            occurred_at=utc_now(),
            producer="other-trainer",
            proposal_id=new_record_id(),
            content_id=harness.content.publish_files({"score.txt": "0.5"}),
            operation="training",
            parent_release_id=parent,
            sample_ids=sample_ids,
        )
    )
    await harness.settle()


async def restart_chain(harness: Harness) -> None:
    harness.chain = EmbeddedRuntime(harness.log, ReleaseChainProcessor(), idle_wait=0.05)
    await harness.chain.start()
    await harness.settle()


async def test_admitted_samples_hold_back_the_committed_offset_until_their_batch_is_decided(
    harness: Harness,
) -> None:
    r0 = await harness.create("s")
    low = await harness.sample("s", r0, score=0.1)
    first, second = await harness.sample("s", r0), await harness.sample("s", r0)
    config = {"batching": {"batch_size": 2}, "eligibility": {"min_score": 0.5}}
    intake = intake_for(harness, config)
    await read(intake, 3)
    assert first in intake.batcher and second in intake.batcher and low not in intake.batcher
    assert intake.pending == 2 and intake.progress.samples_read == 3
    partition, first_offset = await position(harness, first)
    assert (await position(harness, low))[1] < first_offset
    await intake.commit()
    assert await committed_offset(harness, partition) == first_offset  # past the skipped one
    batch = intake.batcher.take("s")
    assert batch is not None and sorted(batch.sample_ids) == sorted([first, second])
    await intake.commit()
    assert await committed_offset(harness, partition) == first_offset  # being decided
    intake.decided(batch.sample_ids)
    await intake.commit()
    assert await committed_offset(harness, partition) == (await position(harness, second))[1] + 1
    assert intake.pending == 0 and intake.status()["committed_offsets"] == {
        str(partition): (await position(harness, second))[1] + 1
    }


async def test_a_sample_of_a_release_not_committed_yet_is_held_then_admitted_when_it_is(
    harness: Harness,
) -> None:
    await harness.chain.close()  # the chain lags: the creation release is served, not committed
    r0 = await harness.scenario_created("s")
    low = await harness.sample("s", r0, score=0.1)
    held = await harness.sample("s", r0)
    intake = intake_for(harness, {"batching": {"batch_size": 1}, "eligibility": {"min_score": 0.5}})
    await read(intake, 2)
    assert held not in intake.batcher and intake.pending == 1
    assert intake.status()["samples_waiting_for_release"] == 1
    assert dict(intake.progress.skipped) == {"score_below_min": 1}
    partition, offset = await position(harness, held)
    assert (await position(harness, low))[1] < offset
    await intake.commit()
    assert await committed_offset(harness, partition) == offset  # never past the held one
    await intake.admit_unresolved()  # the chain has not committed r0 yet: still held
    assert held not in intake.batcher and intake.status()["samples_waiting_for_release"] == 1
    await restart_chain(harness)
    await intake.admit_unresolved()
    assert held in intake.batcher and intake.status()["samples_waiting_for_release"] == 0
    assert intake.pending == 1 and dict(intake.progress.skipped) == {"score_below_min": 1}
    await intake.commit()
    assert await committed_offset(harness, partition) == offset  # now waiting in the batcher


async def test_a_sample_whose_release_never_comes_is_skipped_once_it_waited_long_enough(
    harness: Harness,
) -> None:
    await harness.chain.close()
    r0 = await harness.scenario_created("s")
    sample = await harness.sample("s", r0)
    clock = Clock()
    intake = intake_for(harness, {"batching": {"batch_size": 1}}, release_wait_s=10.0, clock=clock)
    await read(intake, 1)
    clock.now = 9.9
    await intake.admit_unresolved()
    assert intake.pending == 1 and not intake.progress.skipped
    clock.now = 10.0
    await intake.admit_unresolved()
    assert dict(intake.progress.skipped) == {"unknown_release": 1}
    assert intake.pending == 0 and intake.status()["samples_waiting_for_release"] == 0
    partition, offset = await position(harness, sample)
    await intake.commit()
    assert await committed_offset(harness, partition) == offset + 1


async def test_samples_are_skipped_with_their_reason_and_other_recipes_samples_passed_over(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    r0 = await harness.create("s")
    other = await harness.create("o", recipe="sft")
    await harness.sample("o", other)
    task = {"task": "a"}
    taken = await harness.sample("s", r0, metadata=task)
    ungrouped = await harness.sample("s", r0)
    low = await harness.sample("s", r0, score=0.1, metadata=task)
    kept = await harness.sample("s", r0, metadata=task)
    await consume(harness, "s", r0, [taken])
    config = {
        "batching": {"batch_size": 2, "group_by": "task"},
        "eligibility": {"min_score": 0.5, "max_staleness": 5},
    }
    intake = intake_for(harness, config)
    caplog.set_level(logging.INFO, logger="reef.trainer")
    await read(intake, 5)
    assert intake.progress.samples_read == 4  # the other recipe's sample is not counted
    reasons = {r["sample_id"]: r["reason"] for r in intake.progress.rejections}
    assert reasons == {
        taken: "already_consumed",
        ungrouped: "missing_group_key",
        low: "score_below_min",
    }
    assert kept in intake.batcher and intake.pending == 1
    logged = [r.getMessage() for r in caplog.records if r.name == "reef.trainer"]
    assert any(low in line for line in logged) and any(ungrouped in line for line in logged)
    assert not any(taken in line for line in logged)  # counted only: a restart rereads many


async def test_units_consumed_meanwhile_leave_the_batch_and_stale_waiting_samples_are_pruned(
    harness: Harness,
) -> None:
    r0 = await harness.create("s")
    taken, kept, late = [await harness.sample("s", r0) for _ in range(3)]
    intake = intake_for(harness, {"batching": {"batch_size": 2}})
    await read(intake, 3)
    batch = intake.batcher.take("s")
    assert batch is not None and sorted(batch.sample_ids) == sorted([taken, kept])
    await consume(harness, "s", r0, [taken])  # the head moves on: r0's samples are stale
    await intake.chain.catch_up()
    rest = intake.unconsumed(batch)
    assert rest.sample_ids == [kept] and intake.progress.skipped["already_consumed"] == 1
    intake.prune("s")
    assert late not in intake.batcher and intake.progress.skipped["stale"] == 1
    assert intake.pending == 2  # the batch's samples stay pending until it is decided
    intake.decided(batch.sample_ids)
    assert intake.pending == 0
