"""``openclaw_rl``: learning from judged turns, with no report from anyone.

The signal is the conversation itself: the sessions processor binds each agent turn to
what came next (:mod:`reef.core.sessions`), the judge scores it +1/-1/0 and may add a
hindsight hint (:mod:`reef.services.judge`), and each ±1 judgement becomes a report on
the turn's receipt (:mod:`reef.core.feedback`) that the join makes a sample like any
other. This recipe trains on those samples only (others are skipped as ``not_judged``):

1. **Turns** (:mod:`recipes.openclaw_rl.turns`): the engine-recorded prompt and output
   ids and generation-time logprobs of the judged turn (``no_engine_logprobs`` without
   them), only turns served by the current release (``eligibility.max_staleness``, 0).
2. **RL term**: PPO's clipped surrogate on the advantage (the judge's ±1, less
   ``baseline``: nothing by default, or the mean reward of the candidate's turns;
   broadcast over the generated tokens), the ratio taken to the recorded
   generation-time logprobs, clipped to ``(1 - clip_eps, 1 + clip_eps_high)``.
3. **Distillation term** (``distill_coef``, when the judgement carried a hint): the
   teacher is the parent release's policy, frozen at the start of the step, reading the
   prompt *with the hint* appended to the last user message and the same response ids.
   At each response position, over the policy's recorded top-K ids only (both
   distributions restricted and renormalised over those K), the cross-entropy of the
   policy toward the teacher (zero gradient where they agree). It needs the top-K record
   (``REEF_RECORD_TOP_LOGPROBS``): a hinted turn without it is skipped
   (``no_top_logprobs``).
4. Loss = RL + ``distill_coef`` x distillation, per token mean; ``minibatch`` turns per
   AdamW step, ``epochs`` passes, the turns in an order fixed by their content
   (:func:`training_order`), not by when the judge finished them.

Evaluation and gate are as in ``grpo`` (greedy held-out tasks; ``win_margin`` or
``always``). The tensor work is the injected backend's
(:class:`recipes.openclaw_rl.training.OpenClawBackend`, :mod:`trainers.backends.openclaw_rl`).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from recipes.base import Batch, Candidate, Evaluation, Parent, Recipe, RecipeConfig
from recipes.errors import RecipeConfigError, RecipeError, RolloutError
from recipes.evaluation import check_scored_alone, evaluate_tasks
from recipes.openclaw_rl.training import JudgedTurn, OpenClawBackend, OpenClawTraining
from recipes.openclaw_rl.turns import judged_turn
from recipes.samples import Sample
from recipes.tasks import TaskSet
from recipes.training import TrainingBackend, UsesBackend

if TYPE_CHECKING:
    from recipes.base import DeploymentFacts

__all__ = ["OpenClawRLConfig", "OpenClawRLRecipe", "OpenClawTraining"]

logger = logging.getLogger("reef.recipes.openclaw_rl")


def training_order(turn: JudgedTurn) -> str:
    """A turn's place in the candidate's minibatches: a hash of what it holds, so the
    candidate depends on the batch's turns, not on the order the judge finished them in
    (the same turns train the same candidate), and minibatches stay mixed."""
    content = (turn.prompt_ids, turn.output_ids, turn.score, turn.teacher_messages)
    return hashlib.sha256(repr(content).encode()).hexdigest()


class OpenClawRLConfig(RecipeConfig):
    training: OpenClawTraining = Field(default_factory=OpenClawTraining)
    evaluation: TaskSet = Field(default_factory=TaskSet)

    @model_validator(mode="after")
    def _single_turns(self) -> OpenClawRLConfig:
        check_scored_alone(self, self.evaluation, "openclaw_rl trains single judged turns")
        return self


class OpenClawRLRecipe(UsesBackend, Recipe[OpenClawRLConfig]):
    name = "openclaw_rl"
    needs_score = True  # the judge's +1 or -1 is the reward
    config_model = OpenClawRLConfig

    _openclaw: OpenClawBackend | None = None

    def bind_backend(self, backend: TrainingBackend) -> None:
        """Bind a backend that can train judged turns (it has ``train_openclaw_rl``)."""
        if not isinstance(backend, OpenClawBackend):
            raise RecipeConfigError(
                f"recipe openclaw_rl: the training backend {type(backend).__name__} "
                "has no train_openclaw_rl"
            )
        super().bind_backend(backend)
        self._openclaw = backend

    def bind_deployment(self, deployment: DeploymentFacts) -> None:
        """Say at start what the deployment lacks for this recipe to train."""
        if not (deployment.track_sessions and deployment.judge_turns):
            logger.warning(
                "openclaw_rl trains on judged turns only; set REEF_TRACK_SESSIONS=true and "
                "REEF_JUDGE_TURNS=true, or every sample is skipped as not_judged"
            )
        if not deployment.record_tokens:
            logger.warning(
                "openclaw_rl needs engine-recorded token ids and logprobs "
                "(REEF_RECORD_TOKENS=true): other turns are skipped as no_engine_logprobs"
            )
        if self.config.training.distill_coef > 0 and not deployment.record_top_logprobs:
            logger.warning(
                "openclaw_rl distils hinted turns over the recorded top-K tokens; "
                "REEF_RECORD_TOP_LOGPROBS is 0, so hinted turns are skipped as "
                "no_top_logprobs (set it, e.g. 4, or training.distill_coef: 0)"
            )

    def usable(self, sample: Sample) -> str | None:
        try:
            judged_turn(sample, self.config.training)
        except RolloutError as exc:
            return exc.reason
        return None

    def produce(self, batch: Batch, parent: Parent, out_dir: Path) -> Candidate:
        options = self.config.training
        turns = sorted((judged_turn(s, options) for s in batch.samples), key=training_order)
        metrics = self._backend_for_openclaw().train_openclaw_rl(
            parent.folder, turns, out_dir, options
        )
        return Candidate(out_dir, {**metrics, "turns": float(len(turns))})

    def evaluate(self, folder: Path | None) -> Evaluation:
        return evaluate_tasks(
            self.backend,
            folder,
            self.config.evaluation,
            base_model=self.config.training.base_model,
            threads=self.config.training.threads,
        )

    def _backend_for_openclaw(self) -> OpenClawBackend:
        if self._openclaw is None:
            raise RecipeError(
                "recipe openclaw_rl has no training backend "
                "(build it with recipes.registry.build_recipe, or call bind_backend)"
            )
        return self._openclaw
