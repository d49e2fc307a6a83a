"""``gepa`` as a Reef recipe: one reflective step per batch of reported episodes.

Per batch (the trainer's step 3, :mod:`trainers.consumer`), on the scenario's archive
(:mod:`recipes.gepa.archive`, folded from the committed releases the trainer feeds):

1. The served tree joins the archive if unknown; a parent is drawn from the per-task
   fronts (:func:`recipes.gepa.pareto.draw_parent`, keyed by the batch's sample ids);
   with no scored candidate yet, the parent is the served tree.
2. The minibatch is the batch: each report's task (the last user message), the
   reference answer (report ``metadata[gepa.answer_key]``), and, when the parent is the
   served tree, the served output, reported score and feedback (free); otherwise the
   parent runs the tasks (one call each) and the grader scores them.
3. Skip a perfect minibatch; rewrite one component (round-robin) through the reflection
   model; run the child on the minibatch; keep it only if strictly better
   (:func:`recipes.gepa.method.accept_child`), else :class:`CandidateRejectedError`.
4. The trainer's gate evaluates child and served tree on the validation tasks
   (``evaluation``, per-task scores recorded as ``val/<i>`` metrics) and publishes only a
   strictly better child (:func:`recipes.gepa.method.publish`); a child it does not
   publish is recorded as a pending release (:meth:`GEPARecipe.keep_rejected`), so the
   archive keeps it and replay rebuilds it.

Models are reached through the injected :class:`recipes.chat.ChatClient`: the task model
is ``upstream`` (default: the deployment's), the reflection model ``reflection``
(default: the same endpoint).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from pydantic import Field, field_validator

from recipes.base import (
    Batch,
    Candidate,
    Decision,
    DeploymentFacts,
    Evaluation,
    GateConfig,
    Parent,
    Recipe,
    RecipeConfig,
)
from recipes.chat import ChatClient, ChatEndpoint
from recipes.errors import (
    CandidateRejectedError,
    EvaluationError,
    RecipeError,
    TrainingError,
)
from recipes.gepa import method
from recipes.gepa.archive import CURSOR, TASK_PREFIX, Archive
from recipes.gepa.pareto import draw_parent
from recipes.gepa.reflection import Example, read_rewrite, reflection_messages
from recipes.harness_edits import copy_harness, harness_files, system_prompt
from recipes.harness_evolve import HarnessLayout, UpstreamConfig, resolve_endpoint
from recipes.releases import ContentOpener, ReleaseFact
from recipes.samples import Sample
from recipes.strict import StrictModel
from recipes.tasks import Grader, Task, TaskSet
from reef.core.ids import derived_id

logger = logging.getLogger("reef.recipes.gepa")


class GepaSettings(StrictModel):
    seed: int = Field(default=0, description="Seed of the parent draws.")
    answer_key: str = Field(
        default="answer", description="Report metadata key holding the task's reference answer."
    )
    skip_perfect_score: bool = Field(
        default=True, description="Skip a minibatch the parent already solves."
    )
    perfect_score: float = Field(default=1.0, description="A score at least this is perfect.")
    max_tokens: int = Field(default=2048, ge=16, description="Reflection answer budget.")
    max_message_chars: int = Field(
        default=2000, ge=100, description="Each shown input, output or feedback is cut to this."
    )
    max_component_chars: int = Field(default=20000, ge=16, description="Longest rewrite kept.")


class GepaConfig(RecipeConfig):
    upstream: UpstreamConfig = Field(
        default_factory=UpstreamConfig, description="The task model (episodes)."
    )
    reflection: UpstreamConfig = Field(
        default_factory=UpstreamConfig, description="The reflection model (default: upstream)."
    )
    harness: HarnessLayout = Field(default_factory=HarnessLayout)
    evaluation: TaskSet = Field(default_factory=TaskSet, validate_default=True)
    gepa: GepaSettings = Field(default_factory=GepaSettings)

    @field_validator("gate")
    @classmethod
    def _fixed_gate(cls, value: GateConfig) -> GateConfig:
        if value != GateConfig():
            raise ValueError("gepa publishes a strictly better validation mean; no gate settings")
        return value

    @field_validator("evaluation")
    @classmethod
    def _validation_tasks(cls, value: TaskSet) -> TaskSet:
        if not (value.tasks or value.tasks_file):
            raise ValueError("tasks or tasks_file is required (the validation set)")
        return value


class GEPARecipe(Recipe[GepaConfig]):
    name = "gepa"
    needs_score = True  # an example's score ranks candidates on the Pareto front
    config_model = GepaConfig

    def __init__(self, config: GepaConfig) -> None:
        super().__init__(config)
        self.tasks: list[Task] = config.evaluation.load()
        if not self.tasks or any(task.system for task in self.tasks):
            raise RecipeError("recipe.evaluation: tasks needed, without 'system' (the harness)")
        self.grade: Grader = config.evaluation.grader_fn()
        self.archives: dict[str, Archive] = {}
        self.task_model: ChatEndpoint | None = None
        self.reflector: ChatEndpoint | None = None
        self.client: ChatClient | None = None
        self.opener: ContentOpener | None = None
        if config.upstream.base_url and config.upstream.model:
            self.task_model = resolve_endpoint(config.upstream, None)
            self.reflector = self.task_model
        if config.reflection.base_url and config.reflection.model:
            self.reflector = resolve_endpoint(config.reflection, None)

    # -- wiring ------------------------------------------------------------------------

    def bind_deployment(self, deployment: DeploymentFacts) -> None:
        """Fall back on the deployment's upstream where the config names none."""
        self.task_model = resolve_endpoint(self.config.upstream, deployment)
        reflection = self.config.reflection
        same = reflection.base_url is None and reflection.model is None
        self.reflector = self.task_model if same else resolve_endpoint(reflection, deployment)

    def bind_chat(self, client: ChatClient) -> None:
        self.client = client

    def bind_contents(self, opener: ContentOpener) -> None:
        self.opener = opener

    def observe_release(self, fact: ReleaseFact) -> None:
        self.archives.setdefault(fact.scenario, Archive()).observe(fact)

    def keep_rejected(self, candidate: Evaluation) -> bool:
        return True  # every candidate reaching the gate beat its parent on a minibatch

    def _ask(self, endpoint: ChatEndpoint | None, messages: list[dict[str, str]], n: int) -> str:
        if endpoint is None or self.client is None:
            raise RecipeError("gepa has no endpoint or chat client (build it with the registry)")
        return self.client.complete(endpoint, messages, max_tokens=n)

    # -- eligibility -------------------------------------------------------------------

    def usable(self, sample: Sample) -> str | None:
        if task_of(sample) is None:
            return "no_trajectory"
        if not isinstance(sample.metadata.get(self.config.gepa.answer_key), str):
            return "no_reference_answer"
        return None

    # -- one step ----------------------------------------------------------------------

    def produce(self, batch: Batch, parent: Parent, out_dir: Path) -> Candidate:
        archive = self.archives.setdefault(batch.scenario, Archive())
        chosen, folder = self._parent(batch, parent, archive)
        served = chosen == parent.content_id
        pairs = self._tasks(batch.samples)
        examples, calls = self._minibatch(batch.samples, pairs, folder, served=served)
        before = [e.score for e in examples]
        settings = self.config.gepa
        if settings.skip_perfect_score and method.all_perfect(before, settings.perfect_score):
            raise CandidateRejectedError("the parent solves the whole minibatch: nothing to learn")
        cursor = self._rewrite(folder, archive.ensure(chosen).cursor, examples, out_dir)
        after, _ = self._run(out_dir, pairs)
        verdict = method.accept_child(before, after)
        logger.info("gepa %s: child of %s: %s", batch.scenario, chosen, verdict.reason)
        if not verdict.accepted:
            raise CandidateRejectedError(f"child rejected: {verdict.reason}")
        return Candidate(
            out_dir,
            {
                CURSOR: float(cursor),
                "gepa.parent_served": float(served),
                "gepa.minibatch_parent": sum(before),
                "gepa.minibatch_child": sum(after),
                "gepa.metric_calls": float(calls + len(after)),
            },
        )

    def _parent(self, batch: Batch, served: Parent, archive: Archive) -> tuple[str, Path | None]:
        """Step 1: the parent's content id and folder (the served tree joins the archive)."""
        archive.ensure(served.content_id)
        key = derived_id("gepa-step", batch.scenario, *batch.sample_ids)
        chosen = draw_parent(archive.scores(), seed=self.config.gepa.seed, key=key)
        chosen = chosen or served.content_id
        is_served = chosen == served.content_id
        logger.info(
            "gepa %s: parent %s (%s) of %d candidates, %d scored",
            batch.scenario,
            chosen,
            "served" if is_served else "archived",
            len(archive.entries),
            len(archive.scores()),
        )
        return chosen, served.folder if is_served else self._open(chosen)

    def _rewrite(
        self, folder: Path | None, cursor: int, examples: list[Example], out_dir: Path
    ) -> int:
        """Step 3: the child in ``out_dir``, one component rewritten; the child's cursor."""
        files = dict(harness_files(folder, self.config.harness.files))
        if not files:
            raise TrainingError("the parent harness has no component to rewrite")
        path, cursor = method.next_component(list(files), cursor)
        settings = self.config.gepa
        messages = reflection_messages(
            path, files[path], examples, max_chars=settings.max_message_chars
        )
        try:
            reply = self._ask(self.reflector, messages, settings.max_tokens)
        except RecipeError as exc:
            raise TrainingError(f"reflection on {path}: {exc}") from exc
        text = read_rewrite(reply, files[path], max_chars=settings.max_component_chars)
        copy_harness(folder, out_dir)
        (out_dir / path).write_text(text, "utf-8")
        return cursor

    def _open(self, content_id: str) -> Path | None:
        if self.opener is None:
            raise TrainingError("gepa cannot open archived releases (no content opener bound)")
        return self.opener(content_id)

    def _tasks(self, samples: tuple[Sample, ...]) -> list[tuple[str, str]]:
        """(task, reference answer) of each sample (:meth:`usable` admitted only these)."""
        key = self.config.gepa.answer_key
        return [(task_of(s) or "", str(s.metadata[key])) for s in samples]

    def _minibatch(
        self,
        samples: tuple[Sample, ...],
        pairs: list[tuple[str, str]],
        folder: Path | None,
        *,
        served: bool,
    ) -> tuple[list[Example], int]:
        """The parent's records on the batch's tasks, and the metric calls they cost."""
        if served:
            return [served_example(s, task) for s, (task, _) in zip(samples, pairs, strict=True)], 0
        scores, outputs = self._run(folder, pairs)
        examples = [
            Example(task, output, score, default_feedback(score, answer))
            for (task, answer), output, score in zip(pairs, outputs, scores, strict=True)
        ]
        return examples, len(pairs)

    def _run(
        self, folder: Path | None, tasks: list[tuple[str, str]]
    ) -> tuple[list[float], list[str]]:
        """Scores and outputs of the harness in ``folder`` on (prompt, answer) tasks."""
        prompt = system_prompt(folder, self.config.harness.files)
        head = [{"role": "system", "content": prompt}] if prompt else []
        scores, outputs = [], []
        for task, answer in tasks:
            output = self._ask(
                self.task_model,
                [*head, {"role": "user", "content": task}],
                self.config.evaluation.max_new_tokens,
            )
            outputs.append(output)
            scores.append(self._grade(output, answer))
        return scores, outputs

    def _grade(self, output: str, answer: str) -> float:
        try:
            score = float(self.grade(output, answer))
        except Exception as exc:  # a grader's bug fails the step or evaluation (closed)
            raise EvaluationError(f"grader failed: {type(exc).__name__}: {exc}") from exc
        if not math.isfinite(score):
            raise EvaluationError(f"grader gave {score}")
        return score

    # -- the gate ----------------------------------------------------------------------

    def evaluate(self, folder: Path | None) -> Evaluation:
        try:
            scores, _ = self._run(folder, [(t.prompt, t.answer) for t in self.tasks])
        except RecipeError as exc:
            raise EvaluationError(f"validation episode: {exc}") from exc
        mean = sum(scores) / len(scores)
        metrics = {f"{TASK_PREFIX}{i}": s for i, s in enumerate(scores)}
        metrics.update(mean_score=mean, tasks=float(len(scores)))
        return Evaluation(f"gepa:{self.config.evaluation.grader}", mean, metrics)

    def select(self, candidate: Evaluation, baseline: Evaluation | None) -> Decision:
        return method.publish(candidate, baseline)


def task_of(sample: Sample) -> str | None:
    """The task as the agent was given it: the last user message of the last turn."""
    turn = sample.last()
    users = [m["content"] for m in (turn.messages() if turn else []) if m["role"] == "user"]
    return users[-1] if users and users[-1] else None


def served_example(sample: Sample, task: str) -> Example:
    turn = sample.last()
    output = (turn.answer_transcript() if turn else None) or ""
    feedback = sample.feedback
    text = feedback if isinstance(feedback, str) else json.dumps(feedback, sort_keys=True)
    if feedback in (None, "", {}):
        text = f"The output scored {sample.scored():g}."
    return Example(task, output, sample.scored(), text)


def default_feedback(score: float, answer: str) -> str:
    return f"The output scored {score:g}; the expected answer is {answer!r}."
