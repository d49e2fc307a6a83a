"""The trainer over a real embedded log and the real release chain, with a torch-free recipe.

Samples are appended as SampleJoined directly (the join is tested elsewhere); the chain
runs as an EmbeddedRuntime, so every proposal is decided as in production.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from reef.core import topics
from reef.core.chain import ReleaseChainProcessor
from reef.core.events import (
    ReleaseProposed,
    utc_now,
)
from reef.core.ids import EMPTY_CONTENT_ID, new_record_id
from reef.hosts.embedded import EmbeddedRuntime
from tests.support.trainer_harness import FAKE, Harness, until

# ---------------------------------------------------------------------------


async def test_batches_become_releases_naming_parent_and_samples(
    harness: Harness, running: Any
) -> None:
    r0 = await harness.create("s")
    ids = [await harness.sample("s", r0) for _ in range(4)]
    trainer = harness.trainer({"batching": {"batch_size": 2}, "eligibility": {"max_staleness": 5}})
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["accepted"] == 2)
    committed = await harness.committed()
    assert committed[0].parent_release_id == r0
    assert committed[1].parent_release_id == committed[0].release_id
    assert sorted(committed[0].sample_ids + committed[1].sample_ids) == sorted(ids)
    assert json.loads(committed[1].evaluation_json)["candidate"]["score"] == pytest.approx(0.2)
    assert await harness.log.committed("trainer:" + FAKE, topics.SAMPLES)
    assert json.loads(json.dumps(trainer.status()))["batches"] == 2  # GET /reef/status-ready


async def test_staleness_limit_zero_skips_samples_of_an_older_release(
    harness: Harness, running: Any
) -> None:
    r0 = await harness.create("s")
    r1 = await harness.move_head("s", r0, 0.5)
    old = [await harness.sample("s", r0) for _ in range(2)]
    fresh = [await harness.sample("s", r1) for _ in range(2)]
    trainer = harness.trainer({"batching": {"batch_size": 2}})
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
        await until(lambda: trainer.status()["samples_skipped_stale"] == 2)
    (release,) = await harness.committed()
    assert sorted(release.sample_ids) == sorted(fresh)
    assert not set(old) & set(release.sample_ids)
    assert {r["reason"] for r in trainer.status()["recent_rejections"]} == {"stale"}


async def test_staleness_limit_k_admits_samples_up_to_k_releases_behind(
    harness: Harness, running: Any
) -> None:
    r0 = await harness.create("s")
    r1 = await harness.move_head("s", r0, 0.5)
    await harness.move_head("s", r1, 0.6)
    too_old = [await harness.sample("s", r0) for _ in range(2)]
    admitted = [await harness.sample("s", r1) for _ in range(2)]
    trainer = harness.trainer({"batching": {"batch_size": 2}, "eligibility": {"max_staleness": 1}})
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
        await until(lambda: trainer.status()["samples_skipped_stale"] == 2)
    (release,) = await harness.committed()
    assert sorted(release.sample_ids) == sorted(admitted)
    assert not set(too_old) & set(release.sample_ids)


async def test_score_window_rejects_outside_scores(harness: Harness, running: Any) -> None:
    r0 = await harness.create("s")
    low = await harness.sample("s", r0, score=0.1)
    ok = [await harness.sample("s", r0, score=0.8) for _ in range(2)]
    trainer = harness.trainer({"batching": {"batch_size": 2}, "eligibility": {"min_score": 0.5}})
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
    (release,) = await harness.committed()
    assert sorted(release.sample_ids) == sorted(ok) and low not in release.sample_ids
    assert trainer.status()["samples_skipped"] == {"score_below_min": 1}


async def test_gate_fails_closed_when_the_evaluator_raises(harness: Harness, running: Any) -> None:
    r0 = await harness.create("s")
    for _ in range(2):
        await harness.sample("s", r0)
    trainer = harness.trainer({"batching": {"batch_size": 2}, "fail_evaluation": True})
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["rejected"] == 1)
        await until(lambda: trainer.status()["samples_pending"] == 0)
    step = trainer.status()["steps"][-1]
    assert step["outcome"] == "evaluation_failed"
    assert "broken" in step["reason"]
    assert await harness.events(topics.RELEASE_PROPOSALS) == []  # nothing proposed


async def test_gate_rejection_proposes_nothing_and_keeps_the_head(
    harness: Harness, running: Any
) -> None:
    r0 = await harness.create("s")
    for _ in range(2):
        await harness.sample("s", r0)
    trainer = harness.trainer(
        {"batching": {"batch_size": 2}, "gate": {"policy": "win_margin", "margin": 0.5}}
    )
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["rejected"] == 1)
    step = trainer.status()["steps"][-1]
    assert step["outcome"] == "gate_rejected" and "margin 0.5" in step["reason"]
    assert await harness.events(topics.RELEASE_PROPOSALS) == []
    assert trainer.follower.view.head("s") == (r0, EMPTY_CONTENT_ID)


async def test_missing_group_key_is_rejected_with_a_clear_reason(
    harness: Harness, running: Any
) -> None:
    r0 = await harness.create("s")
    lone = await harness.sample("s", r0)
    grouped = [await harness.sample("s", r0, metadata={"prompt_id": "p1"}) for _ in range(2)]
    trainer = harness.trainer(
        {"batching": {"batch_size": 1, "group_by": "prompt_id", "group_size": 2}}
    )
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
    (rejection,) = trainer.status()["recent_rejections"]
    assert rejection["sample_id"] == lone
    assert rejection["reason"] == "missing_group_key"
    assert "'prompt_id'" in rejection["detail"] and "group_by" in rejection["detail"]
    (release,) = await harness.committed()
    assert sorted(release.sample_ids) == sorted(grouped)


async def test_a_restart_never_trains_consumed_samples_again(
    harness: Harness, running: Any
) -> None:
    r0 = await harness.create("s")
    for _ in range(2):
        await harness.sample("s", r0)
    config = {"batching": {"batch_size": 2}, "eligibility": {"max_staleness": 9}}
    first = harness.trainer(config)
    async with running(first):
        await until(lambda: first.status()["candidates"]["accepted"] == 1)
    # a crash after the release committed but before the offsets were: rewind them
    await harness.log.commit("trainer:" + FAKE, topics.SAMPLES, dict.fromkeys(range(6), 0))
    second = harness.trainer(config)
    async with running(second):
        await until(lambda: second.status()["samples_skipped"].get("already_consumed") == 2)
    assert second.status()["batches"] == 0
    assert len(await harness.committed()) == 1


async def test_a_stale_proposal_is_rebased_on_the_new_head(harness: Harness, running: Any) -> None:
    r0 = await harness.create("s")
    for _ in range(2):
        await harness.sample("s", r0)
    trainer = harness.trainer(
        {"batching": {"batch_size": 2}, "eligibility": {"max_staleness": 5}, "train_seconds": 1.0}
    )
    async with running(trainer):
        await until(lambda: bool(trainer.status()["steps"]))
        r1 = await harness.move_head("s", r0, 0.5)  # while the candidate trains
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
    assert trainer.status()["proposals"]["rejected:stale_parent"] == 1
    release = (await harness.committed())[-1]
    assert release.parent_release_id == r1
    assert json.loads(release.evaluation_json)["candidate"]["score"] == pytest.approx(0.6)


async def test_a_stale_proposal_is_dropped_when_the_recipe_says_so(
    harness: Harness, running: Any
) -> None:
    r0 = await harness.create("s")
    for _ in range(2):
        await harness.sample("s", r0)
    trainer = harness.trainer(
        {
            "batching": {"batch_size": 2},
            "eligibility": {"max_staleness": 5},
            "train_seconds": 1.0,
            "on_stale": "drop",
        }
    )
    async with running(trainer):
        await until(lambda: bool(trainer.status()["steps"]))
        await harness.move_head("s", r0, 0.5)
        await until(lambda: trainer.status()["proposals"].get("rejected:stale_parent") == 1)
        await until(lambda: trainer.status()["samples_pending"] == 0)
    assert await harness.committed() == []
    assert trainer.status()["candidates"]["accepted"] == 0


async def test_scenarios_of_other_recipes_are_ignored(harness: Harness, running: Any) -> None:
    r0 = await harness.create("other", recipe="core")
    for _ in range(2):
        await harness.sample("other", r0)
    trainer = harness.trainer({"batching": {"batch_size": 1}})
    async with running(trainer):
        await asyncio.sleep(1.0)
    assert trainer.status()["samples_read"] == 0 and trainer.status()["batches"] == 0


async def test_in_process_trainer_is_supervised_and_resumes_after_a_failure(
    harness: Harness, tmp_path: Path
) -> None:
    from reef.settings import Settings
    from trainers import runner

    config = tmp_path / "recipe.yaml"
    config.write_text(
        "recipe:\n  batching: {batch_size: 2}\n  eligibility: {max_staleness: 5}\n"
        "  decision_timeout_s: 0.5\n"
    )
    settings = Settings.of(state_dir=tmp_path, recipe=FAKE, recipe_config=config)
    r0 = await harness.create("s")
    await harness.chain.close()  # no release chain: the proposal is never decided
    ids = [await harness.sample("s", r0) for _ in range(2)]
    async with runner.in_process_trainer(
        settings, harness.store, harness.content, "test", first_backoff_s=0.1
    ) as trainer:
        assert trainer is not None
        await until(lambda: trainer.status()["error"] is not None)
        assert "no decision on proposal" in trainer.status()["error"]
        harness.chain = EmbeddedRuntime(harness.log, ReleaseChainProcessor(), idle_wait=0.05)
        await harness.chain.start()
        await until(lambda: bool(trainer.status()["committed_offsets"]))
    (release,) = await harness.committed()
    assert sorted(release.sample_ids) == sorted(ids)
    proposals = await harness.events(topics.RELEASE_PROPOSALS)
    assert len({p.proposal_id for p in proposals if isinstance(p, ReleaseProposed)}) == 1


async def test_in_process_trainer_is_none_for_record_only_recipes(
    harness: Harness, tmp_path: Path
) -> None:
    from reef.settings import Settings
    from trainers.runner import in_process_trainer

    for settings in (
        Settings.of(state_dir=tmp_path),  # core
        Settings.of(state_dir=tmp_path, recipe=FAKE, trainer_in_process=False),
    ):
        async with in_process_trainer(settings, harness.store, harness.content, "t") as trainer:
            assert trainer is None


async def test_a_partial_batch_trains_after_max_wait(harness: Harness, running: Any) -> None:
    r0 = await harness.create("s")
    ids = [await harness.sample("s", r0) for _ in range(2)]
    trainer = harness.trainer({"batching": {"batch_size": 5, "max_wait_s": 0.3}})
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
    (release,) = await harness.committed()
    assert sorted(release.sample_ids) == sorted(ids)


async def test_samples_another_release_consumed_meanwhile_are_left_out(
    harness: Harness, running: Any
) -> None:
    r0 = await harness.create("s")
    taken, kept = await harness.sample("s", r0), await harness.sample("s", r0)
    trainer = harness.trainer(
        {"batching": {"batch_size": 2}, "eligibility": {"max_staleness": 5}, "train_seconds": 1.0}
    )
    async with running(trainer):
        await until(lambda: bool(trainer.status()["steps"]))
        # another writer commits a release that consumes one of the batch's samples
        content_id = harness.content.publish_files({"score.txt": "0.5"})
        await harness.store.append(
            ReleaseProposed(
                event_id=new_record_id(),
                scenario="s",
                occurred_at=utc_now(),
                producer="other-trainer",
                proposal_id=new_record_id(),
                content_id=content_id,
                operation="training",
                parent_release_id=r0,
                sample_ids=[taken],
            )
        )
        await harness.settle()
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
    mine = [c for c in await harness.committed() if kept in c.sample_ids]
    assert [c.sample_ids for c in mine] == [[kept]]
    assert trainer.status()["samples_skipped"] == {"already_consumed": 1}


async def test_a_stop_that_arrives_as_a_failure_ends_the_supervisor() -> None:
    """A trainer whose cancellation surfaces as another exception (as asyncio.Condition's
    re-acquire did on 3.11: "Lock is not acquired") is stopped, never restarted: the
    server's shutdown would otherwise hang until it is killed."""
    from trainers import runner

    class CancelledAsError:
        progress = type("P", (), {"error": None})()
        runs = 0

        async def run(self) -> None:
            self.runs += 1
            if self.runs > 1:
                return  # a restart (the defect) ends at once, so the test cannot hang
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise RuntimeError("Lock is not acquired.") from None

        def reset(self) -> None:
            pass

    trainer = CancelledAsError()
    task = asyncio.create_task(runner.supervise(trainer, first_backoff_s=0.01))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(RuntimeError, match="Lock is not acquired"):
        await asyncio.wait_for(task, 2.0)
    assert trainer.runs == 1


# ---------------------------------------------------------------------------
# A sample that arrives before the chain committed the release that served it


async def _created_without_chain(harness: Harness, scenario: str) -> str:
    """The scenario's creation, appended while the chain processor is stopped (as when it
    lags behind the join): the creation release is served but not committed yet."""
    await harness.chain.close()
    return await harness.scenario_created(scenario)


async def test_a_sample_of_a_release_not_committed_yet_waits_for_the_chain(
    harness: Harness, running: Any
) -> None:
    r0 = await _created_without_chain(harness, "s")
    sample = await harness.sample("s", r0)
    trainer = harness.trainer({"batching": {"batch_size": 1}})
    async with running(trainer):
        await until(lambda: trainer.status()["samples_waiting_for_release"] == 1)
        await asyncio.sleep(1.5)  # a few catch-ups: still held, never skipped
        status = trainer.status()
        assert status["samples_pending"] == 1 and not status["samples_skipped"], status
        harness.chain = EmbeddedRuntime(harness.log, ReleaseChainProcessor(), idle_wait=0.05)
        await harness.chain.start()  # the chain catches up: r0 committed
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
    (release,) = await harness.committed()
    assert release.parent_release_id == r0 and release.sample_ids == [sample]
    assert trainer.status()["samples_waiting_for_release"] == 0


async def test_a_sample_of_a_release_never_committed_is_skipped_after_the_wait(
    harness: Harness, running: Any
) -> None:
    r0 = await _created_without_chain(harness, "s")
    await harness.sample("s", r0)
    trainer = harness.trainer({"batching": {"batch_size": 1}}, release_wait_s=1.0)
    async with running(trainer):
        await until(lambda: trainer.status()["samples_skipped"].get("unknown_release") == 1)
        status = trainer.status()
        assert status["samples_pending"] == 0 and status["samples_waiting_for_release"] == 0
        await until(lambda: bool(trainer.status()["committed_offsets"]))  # not held back
