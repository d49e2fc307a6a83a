"""``harness_evolve``: an LLM proposes one edit to a harness; paired episodes decide.

For harness scenarios the release is a folder of text files (a system prompt, skills,
rules; :mod:`recipes.harness_edits` says which files compose the prompt). Per batch:

1. **Propose.** The batch's failing samples (score below ``proposer.failing_below``,
   lowest first, at most ``proposer.max_trajectories``) and the head's harness files go
   to the proposer: the upstream model, through an OpenAI-compatible
   ``/chat/completions`` endpoint (by default the deployment's ``upstream_url``, its key
   and ``upstream_model``), at temperature 0. It must answer with one JSON edit
   (:data:`recipes.harness_edits.EDIT_FORMAT`); a malformed or inapplicable answer
   fails the candidate (closed: nothing is proposed, the head keeps serving).
2. **Evaluate.** A folder is scored by running every task of ``evaluation`` through
   the same endpoint with the harness's system prompt (temperature 0, optional fixed
   ``seed``) and grading each answer with ``evaluation.grader`` (``exact``,
   ``contains`` or ``pkg.mod:func``); the mean is the score. The trainer evaluates the
   candidate and the head on the same tasks (paired episodes); any upstream or grader
   error fails the evaluation, which rejects the candidate.
3. **Gate.** ``win_margin`` only: the candidate is selected when its mean beats the
   head's by at least ``gate.margin`` (and by more than zero: a tie keeps the head).

No training library is imported, and no transport either: the recipe decides the
endpoint (:func:`resolve_endpoint`) and the requests; the calls go through the injected
:class:`recipes.chat.ChatClient` (the registry binds the HTTP one,
:class:`trainers.backends.chat.HttpChatClient`).
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from recipes.base import (
    Batch,
    Candidate,
    DeploymentFacts,
    Evaluation,
    GateConfig,
    Parent,
    Recipe,
    RecipeConfig,
    StrictModel,
)
from recipes.chat import ChatClient, ChatEndpoint
from recipes.errors import EvaluationError, RecipeConfigError, RecipeError, TrainingError
from recipes.harness_edits import (
    EDIT_FORMAT,
    apply_edit,
    copy_harness,
    harness_files,
    parse_edit,
    system_prompt,
)
from recipes.samples import Sample
from recipes.tasks import Grader, Task, TaskSet

logger = logging.getLogger("reef.recipes.harness_evolve")

#: first line of the proposer's system prompt (a scripted upstream recognises it)
PROPOSER_MARKER = "You are Reef's harness proposer."


class UpstreamConfig(StrictModel):
    """The OpenAI-compatible endpoint of the proposer and the episodes."""

    base_url: str | None = Field(
        default=None, description="e.g. https://api.example/v1; null: the deployment's upstream."
    )
    model: str | None = Field(
        default=None, description="Model name; null: the deployment's upstream_model."
    )
    api_key_env: str | None = Field(
        default=None,
        description="Environment variable holding the key; null: the deployment's upstream key.",
    )
    timeout_s: float = Field(default=60.0, gt=0, description="Per request.")
    seed: int | None = Field(default=None, description="Sent as 'seed' when set (determinism).")


class ProposerConfig(StrictModel):
    failing_below: float = Field(
        default=1.0, description="A sample scoring below this is a failure shown to the proposer."
    )
    max_trajectories: int = Field(default=8, ge=1, description="Failures shown per proposal.")
    max_message_chars: int = Field(
        default=2000, ge=100, description="Each shown message is cut to this length."
    )
    max_tokens: int = Field(default=1024, ge=16, description="Proposer's answer budget.")
    max_edit_chars: int = Field(default=8000, ge=16, description="Longest accepted proposal.")
    instructions: str = Field(default="", description="Appended to the proposer's instructions.")


class HarnessLayout(StrictModel):
    files: list[str] = Field(
        default_factory=lambda: ["system_prompt.md", "skills/*.md", "rules/*.md"],
        min_length=1,
        description="Patterns of the files composing the system prompt (the editable files).",
    )
    max_file_chars: int = Field(default=20000, ge=1, description="Longest harness file.")


class HarnessEvolveConfig(RecipeConfig):
    gate: GateConfig = Field(default_factory=lambda: GateConfig(policy="win_margin"))
    upstream: UpstreamConfig = Field(default_factory=UpstreamConfig)
    proposer: ProposerConfig = Field(default_factory=ProposerConfig)
    harness: HarnessLayout = Field(default_factory=HarnessLayout)
    evaluation: TaskSet = Field(default_factory=TaskSet, validate_default=True)

    @field_validator("gate", mode="before")
    @classmethod
    def _win_margin_by_default(cls, value: Any) -> Any:
        if isinstance(value, dict) and "policy" not in value:
            return {**value, "policy": "win_margin"}
        return value

    @field_validator("gate")
    @classmethod
    def _paired_gate(cls, value: GateConfig) -> GateConfig:
        if value.policy != "win_margin":
            raise ValueError(f"policy {value.policy!r}: harness_evolve selects only on win_margin")
        return value

    @field_validator("evaluation")
    @classmethod
    def _task_set(cls, value: TaskSet) -> TaskSet:
        if not (value.tasks or value.tasks_file):
            raise ValueError("tasks or tasks_file is required (the gate runs them)")
        if any(task.system for task in value.tasks):
            raise ValueError("tasks: the harness is the system prompt; drop 'system'")
        return value


def resolve_endpoint(config: UpstreamConfig, deployment: DeploymentFacts | None) -> ChatEndpoint:
    """The endpoint from the recipe config, falling back on the deployment's upstream."""
    base_url = config.base_url
    api_key: str | None = None
    if base_url is None:
        if deployment is None or deployment.upstream_url is None:
            raise RecipeConfigError(
                "recipe.upstream.base_url: the deployment has no upstream_url "
                "(it serves the local engine); set recipe.upstream.base_url"
            )
        if deployment.upstream_dialect != "openai":
            raise RecipeConfigError(
                "recipe.upstream.base_url: the deployment's upstream speaks "
                f"{deployment.upstream_dialect!r}; "
                "set an OpenAI-compatible recipe.upstream.base_url"
            )
        base_url = deployment.upstream_url
        api_key = deployment.upstream_api_key
    if config.api_key_env is not None:
        api_key = os.environ.get(config.api_key_env)
        if not api_key:
            raise RecipeConfigError(
                f"recipe.upstream.api_key_env: ${config.api_key_env} is not set"
            )
    model = config.model or (deployment.upstream_model if deployment is not None else None)
    if not model:
        raise RecipeConfigError(
            "recipe.upstream.model: no model (set it, or the deployment's upstream_model)"
        )
    return ChatEndpoint.at(base_url, model, api_key, timeout_s=config.timeout_s, seed=config.seed)


class HarnessEvolveRecipe(Recipe[HarnessEvolveConfig]):
    name = "harness_evolve"
    needs_score = True  # failures are the samples scored below proposer.failing_below
    config_model = HarnessEvolveConfig

    def __init__(self, config: HarnessEvolveConfig) -> None:
        super().__init__(config)
        self.tasks: list[Task] = config.evaluation.load()
        if not self.tasks:
            raise RecipeConfigError("recipe.evaluation: the task set is empty")
        if any(task.system for task in self.tasks):
            raise RecipeConfigError(
                "recipe.evaluation.tasks_file: the harness is the system prompt; drop 'system'"
            )
        self.grade: Grader = config.evaluation.grader_fn()
        self.endpoint: ChatEndpoint | None = None
        self.chat_client: ChatClient | None = None
        if config.upstream.base_url and config.upstream.model:
            self.endpoint = resolve_endpoint(config.upstream, None)

    def bind_deployment(self, deployment: DeploymentFacts) -> None:
        """Use the deployment's upstream where the config names none (called at start)."""
        self.endpoint = resolve_endpoint(self.config.upstream, deployment)

    def bind_chat(self, client: ChatClient) -> None:
        """Set the chat transport (the registry does this when it builds the recipe)."""
        self.chat_client = client

    def _chat(self) -> _Chat:
        if self.endpoint is None:
            raise RecipeError("harness_evolve has no upstream (recipe.upstream or the deployment)")
        if self.chat_client is None:
            raise RecipeError(
                "harness_evolve has no chat client (build it with recipes.registry.build_recipe, "
                "or call bind_chat)"
            )
        return _Chat(self.chat_client, self.endpoint)

    # -- eligibility ------------------------------------------------------------------

    def usable(self, sample: Sample) -> str | None:
        turn = sample.last()
        return None if turn is not None and turn.messages() else "no_trajectory"

    # -- candidate: one proposed edit -----------------------------------------------------

    def produce(self, batch: Batch, parent: Parent, out_dir: Path) -> Candidate:
        failures = failing(batch.samples, self.config.proposer)
        if not failures:
            raise TrainingError(
                f"no sample of the batch scores below {self.config.proposer.failing_below}: "
                "nothing to fix"
            )
        patterns = self.config.harness.files
        files = harness_files(parent.folder, patterns)
        messages = proposer_messages(files, failures, len(batch.samples), self.config)
        try:
            reply = self._chat().complete(messages, max_tokens=self.config.proposer.max_tokens)
        except RecipeError as exc:
            raise TrainingError(f"proposer: {exc}") from exc
        edit = parse_edit(reply, max_chars=self.config.proposer.max_edit_chars)
        copy_harness(parent.folder, out_dir)
        path = apply_edit(
            out_dir, edit, patterns, max_file_chars=self.config.harness.max_file_chars
        )
        logger.info(
            "proposed edit for %s: %s %s (%s)", batch.scenario, edit.op, path, edit.rationale
        )
        return Candidate(
            out_dir,
            {"failing_samples": float(len(failures)), "proposal_chars": float(len(reply))},
        )

    # -- evaluation: paired episodes --------------------------------------------------------

    def evaluate(self, folder: Path | None) -> Evaluation:
        prompt = system_prompt(folder, self.config.harness.files)
        chat = self._chat()
        head = [{"role": "system", "content": prompt}] if prompt else []
        budget = self.config.evaluation.max_new_tokens
        scores: list[float] = []
        details: list[dict[str, Any]] = []
        for task in self.tasks:
            try:
                output = chat.complete(
                    [*head, {"role": "user", "content": task.prompt}], max_tokens=budget
                )
            except RecipeError as exc:
                raise EvaluationError(f"episode {task.prompt!r}: {exc}") from exc
            try:
                score = float(self.grade(output, task.answer))
            except Exception as exc:  # a grader's bug fails the evaluation (closed)
                raise EvaluationError(f"grader failed: {type(exc).__name__}: {exc}") from exc
            if not math.isfinite(score):
                raise EvaluationError(f"grader gave {score} for {task.prompt!r}")
            scores.append(score)
            details.append({"prompt": task.prompt, "output": output, "score": score})
        mean = sum(scores) / len(scores)
        passed = sum(1 for s in scores if s >= 1.0)
        return Evaluation(
            f"harness:{self.config.evaluation.grader}",
            mean,
            {
                "mean_score": mean,
                "tasks": float(len(scores)),
                "passed": float(passed),
                "system_prompt_chars": float(len(prompt)),
            },
            details,
        )


class _Chat:
    """The recipe's endpoint on the injected client."""

    def __init__(self, client: ChatClient, endpoint: ChatEndpoint) -> None:
        self.client = client
        self.endpoint = endpoint

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int) -> str:
        return self.client.complete(self.endpoint, messages, max_tokens=max_tokens)


def failing(samples: tuple[Sample, ...], config: ProposerConfig) -> list[Sample]:
    """The failures shown to the proposer: lowest score first, then by id (deterministic)."""
    found = sorted(
        (s for s in samples if s.score is not None and s.score < config.failing_below),
        key=lambda s: (s.scored(), s.sample_id),
    )
    return found[: config.max_trajectories]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" […{len(text) - limit} more]"


def proposer_messages(
    files: list[tuple[str, str]],
    failures: list[Sample],
    batch_size: int,
    config: HarnessEvolveConfig,
) -> list[dict[str, str]]:
    """The proposer's request: the harness, the failing trajectories and the edit format."""
    limit = config.proposer.max_message_chars
    patterns = ", ".join(config.harness.files)
    instructions = (
        f"{PROPOSER_MARKER}\n"
        "An agent runs with a harness: text files that together make its system prompt. "
        "You see the harness and trajectories where the agent scored poorly. Work out what "
        "the harness should tell the agent so that it succeeds, and propose ONE edit to one "
        f"harness file. Editable files match: {patterns}.\n{EDIT_FORMAT}"
    )
    if config.proposer.instructions:
        instructions += "\n" + config.proposer.instructions
    lines = ["# Harness files"]
    if not files:
        lines.append("(the harness is empty: create a file)")
    for path, text in files:
        lines += [f"## {path}", _cut(text, limit)]
    lines.append(f"# Failing trajectories ({len(failures)} shown, batch of {batch_size})")
    for number, sample in enumerate(failures, 1):
        lines.append(f"## {number} (score {sample.score:g})")
        turn = sample.last()
        for role, text in turn.transcript() if turn else []:
            lines.append(f"[{role}] {_cut(text, limit)}")
        answer = turn.answer_transcript() if turn else None
        lines.append(f"[assistant] {_cut(answer or '', limit)}")
        if sample.feedback not in (None, "", {}):
            feedback = json.dumps(sample.feedback, ensure_ascii=False, sort_keys=True)
            lines.append(f"[feedback] {_cut(feedback, limit)}")
    return [
        {"role": "system", "content": instructions},
        {"role": "user", "content": "\n".join(lines)},
    ]
