"""``sao``: Single-rollout Asynchronous Optimisation: every report scores one rollout.

No groups and no barrier: each report against one receipt (or one multi-turn
trajectory) is a training sample on its own, and ``batching.batch_size`` of them make a
candidate. Instead of a group's mean, a *critic* (a value model beside the policy, its
scalar head zero-initialised, kept in the release under ``sao-critic/``) gives the
baseline:

1. **Rollouts** (:mod:`recipes.sao.rollouts`): the token ids, action mask and
   generation-time logprobs the engine recorded; a sample without them is skipped
   (``no_engine_logprobs``: ``sao`` never re-tokenises or recomputes them), as are
   turns that do not form one trajectory (``not_one_rollout``).
2. **Steps**: one rollout per prompt per optimiser step (a batch with repeated prompts
   trains in several steps), for ``training.epochs`` passes.
3. **Advantages**: GAE over generated tokens only (observation tokens get none and the
   recursion bridges them), reward = the score on the last generated token. The policy's
   lambda is length-adaptive unless ``training.lam`` is set: ``1 - 1/(alpha * L)`` for a
   rollout of ``L`` generated tokens (alpha 1.5), chosen because the reward's weight at
   the first generated token, ``lambda**L``, then stays near ``exp(-1/alpha)`` (about
   0.5) for every length, where a fixed lambda gives a 2-token answer almost the whole
   reward and a 2000-token one almost none
   (:func:`recipes.sao.training.adaptive_lambda`). The critic regresses on
   ``critic_lambda`` returns (1: Monte Carlo).
4. **Loss** (DIS): ``-sg(f(r)) * A * log pi`` (``sg``: no gradient) per generated token,
   ``r = pi / pi_rollout`` against the recorded logprobs, ``f(r) = r`` strictly inside
   ``(1 - eps_low, 1 + eps_high)``, else 0 (no gradient; ``masked_last`` in the metrics).
5. **Warm-up**: the first ``training.warmup_steps`` optimiser steps of a release line
   train the critic only (``critic_steps_per_actor`` critic updates precede every
   policy update after that).

Evaluation and gate are as in ``grpo`` (greedy held-out tasks); the default gate is
``always`` (every candidate publishes, as in the paper). The tensor work is the
injected backend's (:class:`recipes.sao.training.SaoBackend`,
:mod:`trainers.backends.sao`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from recipes.base import Batch, Candidate, Evaluation, Parent, Recipe, RecipeConfig
from recipes.errors import RecipeConfigError, RecipeError, RolloutError
from recipes.evaluation import check_scored_alone, evaluate_tasks
from recipes.samples import Sample
from recipes.sao.rollouts import distinct_prompt_steps, rollout_of
from recipes.sao.training import SaoBackend, SaoTraining
from recipes.tasks import TaskSet
from recipes.training import TrainingBackend, UsesBackend

if TYPE_CHECKING:
    from recipes.base import DeploymentFacts

__all__ = ["SAOConfig", "SAORecipe", "SaoTraining"]

logger = logging.getLogger("reef.recipes.sao")


class SAOConfig(RecipeConfig):
    training: SaoTraining = Field(default_factory=SaoTraining)
    evaluation: TaskSet = Field(default_factory=TaskSet)

    @model_validator(mode="after")
    def _single_rollouts(self) -> SAOConfig:
        check_scored_alone(self, self.evaluation, "sao trains single rollouts")
        return self


class SAORecipe(UsesBackend, Recipe[SAOConfig]):
    name = "sao"
    needs_score = True  # the rollout's reward is its score
    config_model = SAOConfig

    _sao: SaoBackend | None = None

    def bind_backend(self, backend: TrainingBackend) -> None:
        """Bind a backend that can train ``sao`` candidates (it has ``train_sao``)."""
        if not isinstance(backend, SaoBackend):
            raise RecipeConfigError(
                f"recipe sao: the training backend {type(backend).__name__} has no train_sao"
            )
        super().bind_backend(backend)
        self._sao = backend

    def bind_deployment(self, deployment: DeploymentFacts) -> None:
        """Say at start when the deployment does not ask engines for token data."""
        if not deployment.record_tokens:
            logger.warning(
                "sao trains only on exchanges whose engine recorded token ids and logprobs; "
                'record_tokens is off (set REEF_RECORD_TOKENS=true or send "logprobs": true), '
                "so reports on other exchanges are skipped as no_engine_logprobs"
            )

    def usable(self, sample: Sample) -> str | None:
        try:
            rollout_of(sample, self.config.training)
        except RolloutError as exc:
            return exc.reason
        return None

    def produce(self, batch: Batch, parent: Parent, out_dir: Path) -> Candidate:
        options = self.config.training
        rollouts = [rollout_of(sample, options) for sample in batch.samples]
        steps = distinct_prompt_steps(rollouts)
        metrics = self._backend_for_sao().train_sao(parent.folder, steps, out_dir, options)
        return Candidate(out_dir, {**metrics, "rollouts": float(len(rollouts))})

    def evaluate(self, folder: Path | None) -> Evaluation:
        return evaluate_tasks(
            self.backend,
            folder,
            self.config.evaluation,
            base_model=self.config.training.base_model,
            threads=self.config.training.threads,
        )

    def _backend_for_sao(self) -> SaoBackend:
        if self._sao is None:
            raise RecipeError(
                "recipe sao has no training backend "
                "(build it with recipes.registry.build_recipe, or call bind_backend)"
            )
        return self._sao
