"""``composite``: one scenario evolves its weights and its harness; each part is gated alone.

A release of a composite scenario is one content with two parts (the layout is
:mod:`reef.artifacts.parts`): ``weights/`` (what the engine loads) and ``harness/``
(what the harness routes serve). Each part has its own recipe, configured in its own
section: ``weights`` (``sft``) and ``harness`` (``harness_evolve``). Per batch:

1. **Parts.** Each part's recipe gets the samples of the batch it can use (its own
   ``usable``; a sample is admitted when some part can use it) and produces its part
   from the served release's part. A part without usable samples, or whose production
   fails, is not trained: the served part is kept.
2. **Gate per part.** Each produced part is evaluated by its own recipe, and so is the
   served part; the part's own gate decides (:mod:`recipes.composite.rule`): taken, or
   refused.
3. **Compose.** The candidate holds every taken part and, for every other part, the
   served part as it is. With no part taken, nothing is proposed (the batch fails as
   ``CandidateRejectedError``: the verdict of each part is in the message).
4. **Release.** The trainer's gate runs :meth:`CompositeRecipe.select`: the same rule on
   the composed candidate, whose refused parts are now unchanged; it selects when some
   part is taken. The release's metrics say per part whether it was taken
   (``<part>/taken``) with its candidate and served scores.

So a worse weights part is refused while a better harness part of the same batch is
released, over the served weights; and a rollback, which republishes a whole earlier
content, restores both parts together. The parts' evaluations are remembered by part
content id (evaluations are deterministic), so step 4 re-runs nothing. A release that
is not composite (no ``reef-parts.json``) cannot be a parent: seed a composite scenario
with a composite folder, or with nothing.
"""

from __future__ import annotations

import logging
import shutil
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from recipes.base import (
    Batch,
    Candidate,
    Decision,
    DeploymentFacts,
    Evaluation,
    Parent,
    Recipe,
    RecipeConfig,
)
from recipes.chat import ChatClient
from recipes.composite.rule import (
    POLICY,
    Gate,
    PartScore,
    PartVerdict,
    combine,
    judge,
    release_decision,
    split,
)
from recipes.errors import CandidateRejectedError, EvaluationError, RecipeError, TrainingError
from recipes.harness_evolve import HarnessEvolveConfig, HarnessEvolveRecipe
from recipes.samples import Sample
from recipes.sft import SftConfig, SftRecipe
from recipes.training import TrainingBackend
from reef.artifacts.errors import ArtifactError
from reef.artifacts.parts import (
    HARNESS,
    PARTS_FILE,
    WEIGHTS,
    folder_content_id,
    is_composite,
    part_folder,
    write_marker,
)

logger = logging.getLogger("reef.recipes.composite")

#: part evaluations remembered, by (part, content id)
EVALUATIONS_KEPT = 64
#: keys a part section may not set: one batch trains both parts, so they are the composite's
SHARED_KEYS = ("eligibility", "batching", "on_stale", "max_rebases", "decision_timeout_s")


def _no_shared_keys(section: RecipeConfig) -> None:
    shared = sorted(set(SHARED_KEYS) & section.model_fields_set)
    if shared:
        raise ValueError(f"{', '.join(shared)}: set on the composite recipe, not on one part")


class SftPart(SftConfig):
    """The ``weights`` section: an ``sft`` configuration and its own gate."""

    recipe: Literal["sft"] = Field(default="sft", description="The weights recipe.")

    @model_validator(mode="after")
    def _part_keys(self) -> SftPart:
        _no_shared_keys(self)
        return self


class HarnessEvolvePart(HarnessEvolveConfig):
    """The ``harness`` section: a ``harness_evolve`` configuration and its own gate."""

    recipe: Literal["harness_evolve"] = Field(
        default="harness_evolve", description="The harness recipe."
    )

    @model_validator(mode="after")
    def _part_keys(self) -> HarnessEvolvePart:
        _no_shared_keys(self)
        return self


class CompositeConfig(RecipeConfig):
    weights: SftPart = Field(description="The weights part: its recipe's section and gate.")
    harness: HarnessEvolvePart = Field(
        description="The harness part: its recipe's section and gate."
    )

    @model_validator(mode="after")
    def _gates_are_per_part(self) -> CompositeConfig:
        if "gate" in self.model_fields_set:
            raise ValueError("gate: each part has its own (weights.gate, harness.gate)")
        return self


class CompositeRecipe(Recipe[CompositeConfig]):
    name = "composite"
    config_model = CompositeConfig

    def __init__(self, config: CompositeConfig) -> None:
        super().__init__(config)
        self.weights = SftRecipe(config.weights)
        self.harness = HarnessEvolveRecipe(config.harness)
        #: the parts, in the order they are trained, judged and reported
        self.parts: dict[str, Recipe[Any]] = {HARNESS: self.harness, WEIGHTS: self.weights}
        self._evaluations: OrderedDict[tuple[str, str], Evaluation] = OrderedDict()

    # -- ports, passed on to the parts ---------------------------------------------------

    def bind_backend(self, backend: TrainingBackend) -> None:
        """The weights part's training backend (the registry binds it)."""
        self.weights.bind_backend(backend)

    def bind_chat(self, client: ChatClient) -> None:
        """The harness part's chat transport (the registry binds it)."""
        self.harness.bind_chat(client)

    def bind_deployment(self, deployment: DeploymentFacts) -> None:
        """The harness part's upstream, from the deployment where its section names none."""
        self.harness.bind_deployment(deployment)

    # -- eligibility -----------------------------------------------------------------------

    def usable(self, sample: Sample) -> str | None:
        """Usable when one part can use it (a part that needs a score cannot use a sample
        without one: ``no_score``)."""
        reasons = [
            "no_score" if sample.score is None and recipe.needs_score else recipe.usable(sample)
            for recipe in self.parts.values()
        ]
        if any(reason is None for reason in reasons):
            return None
        return "+".join(sorted({r for r in reasons if r is not None}))

    # -- candidate: every part, gated alone, composed -----------------------------------------

    def produce(self, batch: Batch, parent: Parent, out_dir: Path) -> Candidate:
        if parent.folder is not None and not is_composite(parent.folder):
            raise TrainingError(
                f"release {parent.release_id} is not a composite release (no {PARTS_FILE}): "
                "seed a composite scenario with a composite folder, or with nothing"
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        metrics: dict[str, float] = {}
        verdicts = [self._part(name, batch, parent, out_dir / name, metrics) for name in self.parts]
        taken = {v.part for v in verdicts if v.taken}
        summary = "; ".join(v.describe() for v in verdicts)
        logger.info("composite candidate for %s: %s", batch.scenario, summary)
        if not taken:
            raise CandidateRejectedError(f"no part passed its gate: {summary}")
        for name in self.parts:
            if name not in taken:
                _keep_served(part_folder(parent.folder, name), out_dir / name)
        write_marker(out_dir, [n for n in self.parts if (out_dir / n).is_dir()])
        return Candidate(out_dir, metrics)

    def _part(
        self, name: str, batch: Batch, parent: Parent, out: Path, metrics: dict[str, float]
    ) -> PartVerdict:
        """Produce, evaluate and gate one part; its training metrics go to ``metrics``."""
        recipe = self.parts[name]
        groups = tuple(g for g in batch.groups if all(recipe.usable(s) is None for s in g))
        metrics[f"{name}/taken"] = 0.0
        if not groups:
            return PartVerdict(name, False, False, "no usable sample in the batch")
        served = part_folder(parent.folder, name)
        try:
            candidate = recipe.produce(
                Batch(batch.scenario, groups),
                Parent(parent.release_id, parent.content_id, served),
                out,
            )
            mine, theirs = self._score(name, out), self._score(name, served)
        except Exception as exc:  # one part failing leaves the other free (fails closed)
            logger.warning(
                "%s part of %s not trained: %s",
                name,
                batch.scenario,
                exc,
                exc_info=not isinstance(exc, RecipeError | ArtifactError),
            )
            return PartVerdict(name, False, False, f"not trained: {type(exc).__name__}: {exc}")
        metrics.update({f"{name}/{key}": value for key, value in candidate.metrics.items()})
        metrics[f"{name}/candidate_score"] = mine.evaluation.score
        metrics[f"{name}/served_score"] = theirs.evaluation.score
        [verdict] = judge({name: mine}, {name: theirs}, {name: self._gate(name)})
        metrics[f"{name}/taken"] = 1.0 if verdict.taken else 0.0
        return verdict

    # -- evaluation and the release's gate ----------------------------------------------------

    def evaluate(self, folder: Path | None) -> Evaluation:
        if folder is not None and not is_composite(folder):
            raise EvaluationError(f"{folder.name} is not a composite release (no {PARTS_FILE})")
        return combine({name: self._score(name, part_folder(folder, name)) for name in self.parts})

    def select(self, candidate: Evaluation, baseline: Evaluation | None) -> Decision:
        if baseline is None:
            return Decision(False, POLICY, "no evaluation of the served release")
        try:
            gates = {name: self._gate(name) for name in self.parts}
            return release_decision(judge(split(candidate), split(baseline), gates))
        except (KeyError, EvaluationError) as exc:  # not two composite evaluations: closed
            return Decision(False, POLICY, f"cannot judge the parts: {exc!r}")

    def _gate(self, name: str) -> Gate:
        return self.parts[name].select

    def _score(self, name: str, folder: Path | None) -> PartScore:
        """The part's evaluation by its recipe, once per part content (deterministic)."""
        key = (name, folder_content_id(folder))
        if key not in self._evaluations:
            evaluation = self.parts[name].evaluate(folder)
            if len(self._evaluations) >= EVALUATIONS_KEPT:
                self._evaluations.popitem(last=False)
            self._evaluations[key] = evaluation
        return PartScore(key[1], self._evaluations[key])


def _keep_served(served: Path | None, out: Path) -> None:
    """Replace a part that was not taken by the served one (absent stays absent)."""
    shutil.rmtree(out, ignore_errors=True)
    if served is not None:
        shutil.copytree(served, out)
