"""Running a trainer: as ``reef trainer`` (its own process) or inside ``reef serve``.

In-process (the embedded default), :func:`in_process_trainer` is an async context
manager for the app's lifespan: it resolves the deployment's recipe once (a bad
configuration raises at start), yields the running :class:`Trainer` (None for a
record-only recipe such as ``core``, or with ``trainer_in_process`` off) and supervises
it: an unexpected failure is logged, shown in ``status()["error"]`` and the trainer
restarts after a backoff (it resumes from its committed offsets, as after a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from recipes.base import Recipe
from recipes.registry import recipe_from_settings
from reef.artifacts import ClaimCheck, open_store
from reef.artifacts.content import ContentStore
from reef.core.errors import ConfigError
from reef.observability.tracing import Tracing
from reef.services import supervision
from reef.services.eventstore import EventStore
from reef.services.supervision import FIRST_BACKOFF_S
from reef.settings import Settings
from trainers.consumer import Trainer, TrainerConfig
from trainers.publish import Publisher, publish_config, training_device


def build_trainer(
    settings: Settings,
    store: EventStore,
    content: ContentStore | None = None,
    *,
    recipe: Recipe[Any] | None = None,
    config_file: Path | None = None,
    producer: str | None = None,
    partitions: tuple[int, ...] | None = None,
    tracing: Tracing | None = None,
) -> Trainer:
    """A trainer for the deployment's recipe (not started)."""
    chosen = recipe or recipe_from_settings(settings, config_file)
    deployment = settings.deployment
    if chosen.config.rollout is not None and not deployment.rollouts:
        raise ConfigError(
            f"recipe {deployment.recipe!r} rolls its candidates out (rollout:), which needs "
            "REEF_ROLLOUTS=true here and where the API and the processors run"
        )
    content = content or ContentStore(open_store(settings))
    claims = ClaimCheck(content.store, settings.artifacts.claim_check_bytes)
    config = TrainerConfig(
        recipe_name=deployment.recipe,
        producer=producer or f"{socket.gethostname()}-{os.getpid()}",
        work_dir=deployment.state_dir / "trainer" / deployment.recipe.replace(":", "_"),
        partitions=partitions,
    )
    publishing = publish_config(settings.trainer, training_device(chosen.config))
    return Trainer(
        chosen,
        store,
        content,
        config,
        resolve=lambda ref: claims.resolve(None, ref),
        tracing=tracing,
        publisher=None if publishing is None else Publisher(publishing),
    )


async def run_trainer(
    settings: Settings,
    store: EventStore,
    content: ContentStore | None = None,
    *,
    recipe: Recipe[Any] | None = None,
    producer: str | None = None,
) -> None:
    """Run the deployment's trainer until cancelled (returns at once for ``core``)."""
    trainer = build_trainer(settings, store, content, recipe=recipe, producer=producer)
    if not trainer.recipe.trains:
        return
    await trainer.run()


@contextlib.asynccontextmanager
async def in_process_trainer(
    settings: Settings,
    store: EventStore,
    content: ContentStore,
    producer: str,
    *,
    recipe: Recipe[Any] | None = None,
    first_backoff_s: float = FIRST_BACKOFF_S,
    tracing: Tracing | None = None,
) -> AsyncIterator[Trainer | None]:
    """The trainer as a supervised task of the app (None when the recipe never trains);
    ``recipe``: the deployment's, when the caller loaded it already; ``tracing``: the
    serving process's, so training spans link to the reports it received."""
    recipe = recipe or recipe_from_settings(settings)
    if not recipe.trains or not settings.trainer.in_process:
        yield None
        return
    trainer = build_trainer(
        settings, store, content, recipe=recipe, producer=producer, tracing=tracing
    )
    task = asyncio.create_task(supervise(trainer, first_backoff_s), name="trainer")
    try:
        yield trainer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def supervise(trainer: Trainer, first_backoff_s: float = FIRST_BACKOFF_S) -> None:
    """Run the trainer; after a failure log it, show it in status and start again."""

    def failed(error: str) -> None:
        trainer.progress.error = error

    await supervision.supervise(
        "trainer",
        trainer.run,
        on_failure=failed,
        before_restart=trainer.reset,
        first_backoff_s=first_backoff_s,
    )
