"""The trainer in-process over an embedded log: a :class:`Harness` that creates
scenarios, submits samples and reads releases (:func:`embedded_world` builds one, also for
tests/support/gepa_trainer.py), the ``harness`` and ``running`` fixtures (re-exported by
tests/unit/conftest.py) and :func:`until`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from recipes.registry import build_recipe
from reef.artifacts import LocalArtifactStore
from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.chain import ReleaseChainProcessor
from reef.core.events import (
    Event,
    ReleaseCommitted,
    ReleaseProposed,
    SampleJoined,
    ScenarioCreated,
    utc_now,
)
from reef.core.ids import EMPTY_CONTENT_ID, derived_id, new_record_id, release_id
from reef.hosts.embedded import EmbeddedRuntime
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from trainers.consumer import Trainer, TrainerConfig
from trainers.publish import Publisher

FAKE = "tests.support.fake_recipe:FakeRecipe"


@dataclass
class Harness:
    tmp: Path
    log: EmbeddedLog
    store: EventStore
    chain: EmbeddedRuntime
    content: ContentStore

    async def settle(self) -> None:
        async with asyncio.timeout(30):
            while sum((await self.chain.lag()).values()) > 0:
                await asyncio.sleep(0.02)

    async def create(self, scenario: str, recipe: str = FAKE) -> str:
        initial = await self.scenario_created(scenario, recipe)
        await self.settle()
        return initial

    async def scenario_created(self, scenario: str, recipe: str = FAKE) -> str:
        """Append the scenario's creation (the chain commits its release when it runs);
        returns that release's id."""
        initial = release_id(scenario, None, EMPTY_CONTENT_ID, "creation")
        await self.store.append(
            ScenarioCreated(
                event_id=derived_id("scenario", scenario),
                scenario=scenario,
                occurred_at=utc_now(),
                producer="test",
                recipe=recipe,
                initial_release_id=initial,
            )
        )
        return initial

    async def move_head(self, scenario: str, parent: str, score: float) -> str:
        """An admin-style training proposal with real content; returns the new head."""
        return await self.publish_head(scenario, parent, {"score.txt": f"{score:.6f}"})

    async def publish_head(self, scenario: str, parent: str, files: dict[str, bytes | str]) -> str:
        """``files`` published and proposed by an admin as training on ``parent``; returns
        the release that becomes the head."""
        content_id = self.content.publish_files(files)
        await self.store.append(
            ReleaseProposed(
                event_id=new_record_id(),
                scenario=scenario,
                occurred_at=utc_now(),
                producer="admin",
                proposal_id=new_record_id(),
                content_id=content_id,
                operation="training",
                parent_release_id=parent,
            )
        )
        await self.settle()
        return release_id(scenario, parent, content_id, "training")

    async def sample(
        self,
        scenario: str,
        served_by: str,
        *,
        score: float = 1.0,
        metadata: dict[str, Any] | None = None,
        shadow_of: str | None = None,
        meta_info: dict[str, Any] | None = None,
    ) -> str:
        """A sample as the join makes it; ``shadow_of``: of a shadow copy of that receipt;
        ``meta_info``: the engine's record of the answer (token ids, log-probabilities)."""
        sample_id = new_record_id()
        turn: dict[str, Any] = {
            "receipt": new_record_id(),
            "release_id": served_by,
            "route": "/v1/chat/completions",
            "request": {"messages": [{"role": "user", "content": "say hi"}]},
            "response": {"choices": [{"message": {"role": "assistant", "content": "hi"}}]},
        }
        if shadow_of is not None:
            turn["shadow_of"] = shadow_of
        if meta_info is not None:
            turn["response"]["meta_info"] = meta_info
        await self.store.append(
            SampleJoined(
                event_id=sample_id,
                scenario=scenario,
                occurred_at=utc_now(),
                producer="reef-join",
                report_id=new_record_id(),
                references=[turn["receipt"]],
                trajectory_json=json.dumps([turn]),
                score=score,
                feedback_json=json.dumps({"correction": "hi"}),
                metadata_json=json.dumps(metadata or {}),
                release_ids=[served_by],
            )
        )
        return sample_id

    def trainer(
        self,
        config: dict[str, Any],
        *,
        recipe_name: str = FAKE,
        release_wait_s: float = 60.0,
        store: EventStore | None = None,
        publisher: Publisher | None = None,
    ) -> Trainer:
        """A trainer of ``config`` (not started); ``store``: one over the same log that
        opens sealed samples, instead of the harness's."""
        recipe = build_recipe(recipe_name, config)
        trainer_config = TrainerConfig(
            recipe_name, "test", self.tmp / "trainer", release_wait_s=release_wait_s
        )
        return Trainer(
            recipe, store or self.store, self.content, trainer_config, publisher=publisher
        )

    async def events(self, topic: str) -> list[Event]:
        return [s.event async for s in self.store.read(topic) if s.event is not None]

    async def committed(self) -> list[ReleaseCommitted]:
        """Training releases that consumed samples (the trainer's)."""
        return [
            e
            for e in await self.events(topics.RELEASES)
            if isinstance(e, ReleaseCommitted) and e.operation == "training" and e.sample_ids
        ]


@contextlib.asynccontextmanager
async def embedded_world(state: Path) -> AsyncIterator[Harness]:
    """An embedded log under ``state`` with Reef's topics, the release chain running on
    it and a local artifact store there (what a trainer needs; closed at exit)."""
    log = EmbeddedLog(state / "log.sqlite3")
    await log.start()
    await log.ensure_topics(list(topics.ALL_TOPICS))
    store = EventStore(log)
    chain = EmbeddedRuntime(log, ReleaseChainProcessor(), idle_wait=0.05)
    await chain.start()
    content = ContentStore(LocalArtifactStore.in_state_dir(state))
    world = Harness(state, log, store, chain, content)
    try:
        yield world
    finally:
        await world.chain.close()  # a test may have replaced it
        await log.close()


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with embedded_world(tmp_path) as world:
        yield world


@pytest.fixture
def running() -> Callable[..., Any]:
    """``async with running(trainer):`` runs it as a task for the block."""

    class Running:
        def __init__(self, trainer: Trainer) -> None:
            self.trainer = trainer
            self.task: asyncio.Task[None] | None = None

        async def __aenter__(self) -> Trainer:
            self.task = asyncio.create_task(self.trainer.run())
            return self.trainer

        async def __aexit__(self, *exc: object) -> None:
            assert self.task is not None
            failed = self.task.done() and not self.task.cancelled() and self.task.exception()
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            assert not failed, f"the trainer failed: {self.task.exception()!r}"

    return Running


async def until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)
