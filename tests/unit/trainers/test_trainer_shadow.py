"""The never-trained rule where it holds: a trainer over a real embedded log and the real
release chain admits no sample that holds a shadow copy (reef.core.shadow, rule 5)."""

from __future__ import annotations

from typing import Any

from reef.core.ids import new_record_id
from tests.support.trainer_harness import Harness, until


async def test_a_sample_of_a_shadow_copy_is_skipped_and_never_in_a_release(
    harness: Harness, running: Any
) -> None:
    r0 = await harness.create("s")
    copied = [await harness.sample("s", r0, shadow_of=new_record_id()) for _ in range(3)]
    served = [await harness.sample("s", r0) for _ in range(2)]
    trainer = harness.trainer({"batching": {"batch_size": 2}})
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
        await until(lambda: trainer.status()["samples_skipped"].get("shadow_exchange") == 3)
    (release,) = await harness.committed()
    assert sorted(release.sample_ids) == sorted(served)
    skipped = {r["sample_id"] for r in trainer.status()["recent_rejections"]}
    assert skipped == set(copied)
