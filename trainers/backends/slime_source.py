"""A Reef data source for slime (THUDM/slime): Reef batches as slime rollout groups.

slime trains from groups of ``slime.utils.types.Sample`` returned by a rollout function
``generate_rollout(args, rollout_id, data_source, evaluation=False)``. This module lets
that function draw from Reef instead of generating: a Reef trainer (or anything holding
:class:`recipes.base.Batch` objects) puts batches into a :class:`ReefRolloutSource`;
slime's rollout function (:func:`generate_rollout`, set with
``--rollout-function-path trainers.backends.slime_source.generate_rollout``) takes them
out as ``list[list[Sample]]``, one inner list per Reef group, token for token as the
engine recorded them (prompt + output ids, a loss mask over the output, the rollout
log-probabilities, the reward and the serving release ids as weight versions).

slime is imported lazily (only when no ``sample_factory`` is given), so this module
imports without it; the tests use a duck-typed stand-in for slime's ``Sample``. This
in-memory source serves a rollout function in the same process as the Reef trainer; slime's
``train.py`` runs its rollout function in a Ray actor, so ``training.backend: slime``
(:mod:`trainers.backends.slime_job`) hands the batch over as a file instead.
"""

from __future__ import annotations

import importlib
import queue
from collections.abc import Callable
from typing import Any

from recipes.base import Batch
from recipes.errors import TrainingError
from recipes.grpo import tokens_of
from recipes.samples import Sample

SampleFactory = Callable[..., Any]


def slime_sample_class() -> SampleFactory:
    """``slime.utils.types.Sample`` (TrainingError when slime is not installed)."""
    try:
        found: SampleFactory = importlib.import_module("slime.utils.types").Sample
    except ImportError as exc:
        raise TrainingError(
            "the slime backend needs slime installed (THUDM/slime from its source checkout; "
            "not the unrelated PyPI package of that name)"
        ) from exc
    return found


def to_slime(sample: Sample, factory: SampleFactory, group_index: int, index: int) -> Any:
    """One Reef sample as a slime Sample (TrainingError if it carries no token data)."""
    tokens = tokens_of(sample)
    if tokens is None:
        raise TrainingError(f"sample {sample.sample_id} has no recorded token ids/logprobs")
    prompt_ids, output_ids, logprobs = tokens
    turn = sample.last()
    return factory(
        group_index=group_index,
        index=index,
        prompt=turn.messages() if turn is not None else "",
        tokens=prompt_ids + output_ids,
        response=(turn.answer() if turn is not None else None) or "",
        response_length=len(output_ids),
        label=sample.correction(),
        reward=sample.score,
        loss_mask=[1] * len(output_ids),
        weight_versions=list(sample.release_ids),
        rollout_log_probs=logprobs,
        metadata={"reef_sample_id": sample.sample_id, "reef_scenario": sample.scenario},
    )


def to_slime_groups(batch: Batch, factory: SampleFactory | None = None) -> list[list[Any]]:
    make = factory or slime_sample_class()
    index = 0
    groups: list[list[Any]] = []
    for group_index, group in enumerate(batch.groups):
        converted = []
        for sample in group:
            converted.append(to_slime(sample, make, group_index, index))
            index += 1
        groups.append(converted)
    return groups


class ReefRolloutSource:
    """Reef batches waiting for slime; thread-safe (slime's rollout runs in its own actor)."""

    def __init__(self, sample_factory: SampleFactory | None = None) -> None:
        self._factory = sample_factory
        self._groups: queue.Queue[list[Any]] = queue.Queue()

    def put(self, batch: Batch) -> None:
        for group in to_slime_groups(batch, self._factory):
            self._groups.put(group)

    def get_samples(self, num_groups: int, timeout: float | None = None) -> list[list[Any]]:
        """The next ``num_groups`` groups, oldest first (blocks until they are there)."""
        return [self._groups.get(timeout=timeout) for _ in range(num_groups)]

    def pending(self) -> int:
        return self._groups.qsize()


def generate_rollout(
    args: Any, rollout_id: int, data_source: ReefRolloutSource, evaluation: bool = False
) -> Any:
    """slime's rollout-function signature: Reef's groups instead of fresh generations."""
    if evaluation:
        raise TrainingError("Reef evaluates candidates itself; slime's eval rollouts are unused")
    groups = data_source.get_samples(int(args.rollout_batch_size))
    try:
        output_type = importlib.import_module("slime.rollout.base_types").RolloutFnTrainOutput
    except ImportError:
        return groups  # slime's legacy form (and what the stand-in tests check)
    return output_type(samples=groups, metrics={"reef/rollout_id": rollout_id})
