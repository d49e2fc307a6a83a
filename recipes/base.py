"""The recipe contract: which samples train, how they batch, how a batch becomes a
candidate, how the candidate is scored and whether it is selected.

A trainer (:mod:`trainers.consumer`) drives a recipe; the recipe never touches the log,
the chain or the artifact store, and imports no training library at module level:

1. **Eligibility** — :meth:`Recipe.admit` returns ``None`` or a rejection reason for a
   sample, given its *staleness*: how many releases the head is ahead of the release
   that served it (0 = served by the head). The shared rules are a score window
   (``eligibility.min_score``/``max_score``) and a staleness limit
   (``eligibility.max_staleness``, default 0); a report may give feedback without a
   score, and a recipe that trains on scores (:attr:`Recipe.needs_score`) or a set
   score window skips such a sample as ``no_score``; a recipe adds its own rules in
   :meth:`Recipe.usable` (e.g. "carries a training signal").
2. **Batching** — ``batching.batch_size`` units make a batch. A unit is one sample, or
   with ``batching.group_by`` (a report ``metadata`` key) one complete group of
   ``batching.group_size`` samples sharing that key's value; a sample missing the key
   is rejected (``missing_group_key``). Against feedback poisoning (docs/security.md),
   ``batching.max_per_reporter`` caps the units one reporter (token) may have in a
   batch (the rest wait for a later batch) and ``batching.min_distinct_reporters``
   holds a batch until that many reporters contributed to it (see
   :meth:`Batching.choose`).
3. **Candidate production** — :meth:`Recipe.produce` writes a candidate folder from the
   batch, starting from the parent release's files (a training backend; blocking, the
   trainer runs it in a worker thread).
4. **Evaluation** — :meth:`Recipe.evaluate` scores a folder (the candidate, or the
   current release for comparison). It must be deterministic, so repeating it (after a
   crash, or for the same candidate) gives the same result; an exception fails closed.
5. **Gate** — :meth:`Recipe.select` applies ``gate.policy``: ``always``, ``floor``
   (candidate score ≥ ``gate.floor``), ``win_margin`` (candidate ≥ current release +
   ``gate.margin`` on the same evaluation), or a dotted ``pkg.mod:func`` called as
   ``func(candidate, baseline, gate_config) -> Decision | bool``.

Configuration is one frozen pydantic model per recipe (``extra="forbid"``), so an unknown
key or a wrong type fails at start with the key's dotted name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import (
    Field,
    ValidationError,
    model_validator,
)

from recipes.errors import RecipeConfigError, RecipeError
from recipes.gates import Decision, Evaluation, GateConfig, decide
from recipes.rollout import RolloutConfig
from recipes.samples import Sample
from recipes.strict import StrictModel

__all__ = [  # the gate's types live with the gates; recipes import them from here too
    "Batch",
    "Candidate",
    "Decision",
    "Evaluation",
    "GateConfig",
    "Parent",
    "Recipe",
    "RecipeConfig",
    "StrictModel",
]


class Eligibility(StrictModel):
    """Which samples may train."""

    min_score: float | None = Field(default=None, description="Lowest admitted score (inclusive).")
    max_score: float | None = Field(default=None, description="Highest admitted score (inclusive).")
    max_staleness: int = Field(
        default=0, ge=0, description="Releases the head may be ahead of the serving release."
    )

    def check(self, sample: Sample, staleness: int | None) -> str | None:
        """``None`` when admitted, else the reason (``score_below_min``, ``stale``, ...)."""
        windowed = self.min_score is not None or self.max_score is not None
        if sample.score is None and windowed:
            return "no_score"  # a window cannot admit what it cannot place
        if self.min_score is not None and sample.scored() < self.min_score:
            return "score_below_min"
        if self.max_score is not None and sample.scored() > self.max_score:
            return "score_above_max"
        if staleness is None:
            return "unknown_release"
        if staleness > self.max_staleness:
            return "stale"
        return None


#: the reporter of samples whose reports were written before reporters were recorded
UNKNOWN_REPORTER = ""


def reporter_of(sample: Sample) -> str:
    """Who a batch attributes ``sample`` to (unrecorded reporters count as one)."""
    return sample.reporter if sample.reporter is not None else UNKNOWN_REPORTER


class Batching(StrictModel):
    """How admitted samples form a batch."""

    batch_size: int = Field(default=32, ge=1, description="Units per batch (samples or groups).")
    group_by: str | None = Field(
        default=None, description="Report metadata key that groups samples."
    )
    group_size: int = Field(default=1, ge=1, description="Samples that complete a group.")
    max_wait_s: float | None = Field(
        default=None, gt=0, description="Train a partial batch after this long without new samples."
    )
    max_per_reporter: int | None = Field(
        default=None,
        ge=1,
        description="Units one reporter (token) may have in one batch; the rest wait for a "
        "later batch (unset: no cap).",
    )
    min_distinct_reporters: int = Field(
        default=1, ge=1, description="Distinct reporters a batch needs before it trains."
    )

    @model_validator(mode="after")
    def _reachable(self) -> Batching:
        most = self.batch_size * self.group_size
        if self.min_distinct_reporters > most:
            raise ValueError(
                f"min_distinct_reporters ({self.min_distinct_reporters}) exceeds the samples "
                f"a batch can hold (batch_size x group_size = {most})"
            )
        return self

    def choose(
        self, units: Sequence[tuple[Sample, ...]], *, partial: bool = False
    ) -> list[tuple[Sample, ...]] | None:
        """The units of the next batch from ``units`` (oldest first), or None if none may
        train yet: a full batch (any size when ``partial``) within ``max_per_reporter``
        that has ``min_distinct_reporters``. Units left out keep waiting.

        A unit counts once for every reporter with a sample in it. While filling, the
        last free places are kept for units that bring a reporter not in the batch yet.
        """
        chosen: list[tuple[Sample, ...]] = []
        counts: Counter[str] = Counter()
        for unit in units:
            if len(chosen) == self.batch_size:
                break
            who = {reporter_of(s) for s in unit}
            if self.max_per_reporter is not None and any(
                counts[r] >= self.max_per_reporter for r in who
            ):
                continue
            still_needed = self.min_distinct_reporters - len(counts)
            places_after = self.batch_size - len(chosen) - 1
            if not who - counts.keys() and places_after < still_needed:
                continue
            chosen.append(unit)
            counts.update(who)
        if not chosen or len(counts) < self.min_distinct_reporters:
            return None
        if len(chosen) < self.batch_size and not partial:
            return None
        return chosen


class RecipeConfig(StrictModel):
    """What every recipe's configuration holds."""

    eligibility: Eligibility = Field(default_factory=Eligibility)
    batching: Batching = Field(default_factory=Batching)
    gate: GateConfig = Field(default_factory=GateConfig)
    on_stale: Literal["rebase", "drop"] = Field(
        default="rebase",
        description="A proposal whose parent is no longer the head: retrain or drop.",
    )
    max_rebases: int = Field(
        default=2, ge=0, description="Re-bases of one batch before it is dropped."
    )
    decision_timeout_s: float = Field(
        default=120.0, gt=0, description="Longest wait for the chain's decision on a proposal."
    )
    rollout: RolloutConfig | None = Field(
        default=None,
        description="Try each accepted candidate on live traffic (canary or shadow) before "
        "it serves all: recipes/rollout.py.",
    )


@dataclass(frozen=True, slots=True)
class Batch:
    """Samples that train together (``groups`` is one tuple per unit)."""

    scenario: str
    groups: tuple[tuple[Sample, ...], ...]

    @property
    def samples(self) -> tuple[Sample, ...]:
        return tuple(s for group in self.groups for s in group)

    @property
    def sample_ids(self) -> list[str]:
        return sorted(s.sample_id for s in self.samples)


@dataclass(frozen=True, slots=True)
class Parent:
    """The release a candidate is built on: its files, or None for the built-in base."""

    release_id: str
    content_id: str
    folder: Path | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentFacts:
    """What a recipe is told of the deployment it trains for, once at start
    (``bind_deployment``): the upstream Reef relays to, which a recipe that calls a model
    falls back on, and what the deployment records. Built from the deployment's settings
    by the registry; a recipe never sees the settings themselves."""

    upstream_url: str | None = None
    upstream_dialect: str = "openai"
    upstream_api_key: str | None = field(default=None, repr=False)
    upstream_model: str | None = None
    #: agent turns are bound into sessions (REEF_TRACK_SESSIONS)
    track_sessions: bool = False
    #: completed turns are judged into reports (REEF_JUDGE_TURNS)
    judge_turns: bool = False
    #: engines are asked for token ids and logprobs (REEF_RECORD_TOKENS, or top logprobs)
    record_tokens: bool = False
    #: top-K logprobs recorded per generated token (REEF_RECORD_TOP_LOGPROBS; 0: none)
    record_top_logprobs: int = 0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A produced candidate: its folder and the backend's training metrics."""

    folder: Path
    metrics: dict[str, float] = field(default_factory=dict)


C = TypeVar("C", bound=RecipeConfig)


class Recipe(ABC, Generic[C]):
    """Base of every recipe; subclasses set ``name``, ``config_model`` and the hooks."""

    name: ClassVar[str]
    config_model: ClassVar[type[RecipeConfig]] = RecipeConfig
    #: ``False`` for record-only recipes: no trainer runs for them
    trains: ClassVar[bool] = True
    #: ``True`` when training reads each sample's score: a report of feedback alone is
    #: then skipped (``no_score``) rather than trained on
    needs_score: ClassVar[bool] = False

    def __init__(self, config: C) -> None:
        self.config = config

    @classmethod
    def parse_config(
        cls, data: Mapping[str, Any] | None, *, base_dir: Path | None = None
    ) -> RecipeConfig:
        """Validate a ``recipe:`` mapping; RecipeConfigError names each bad key.

        ``base_dir`` is where relative paths in it are read from (the YAML's folder).
        """
        try:
            return cls.config_model.model_validate(dict(data or {}), context={"base_dir": base_dir})
        except ValidationError as exc:
            problems = "; ".join(
                f"recipe.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise RecipeConfigError(f"recipe {cls.name}: {problems}") from exc

    def admit(self, sample: Sample, staleness: int | None) -> str | None:
        """``None`` when the sample may train, else the rejection reason."""
        if sample.score is None and self.needs_score:
            return "no_score"
        return self.config.eligibility.check(sample, staleness) or self.usable(sample)

    def usable(self, sample: Sample) -> str | None:
        """Recipe-specific eligibility (after the shared rules); ``None`` = usable."""
        return None

    def group_of(self, sample: Sample) -> str | None:
        """The sample's group value, or None when not grouping; raises if the key is missing."""
        key = self.config.batching.group_by
        if key is None:
            return None
        if key not in sample.metadata:
            raise MissingGroupKeyError(key)
        return str(sample.metadata[key])

    @abstractmethod
    def produce(self, batch: Batch, parent: Parent, out_dir: Path) -> Candidate:
        """Write a candidate built on ``parent`` from ``batch`` into ``out_dir`` (blocking)."""

    @abstractmethod
    def evaluate(self, folder: Path | None) -> Evaluation:
        """Score a release folder (None = the built-in base); deterministic (blocking)."""

    def select(self, candidate: Evaluation, baseline: Evaluation | None) -> Decision:
        return decide(self.config.gate, candidate, baseline)


class MissingGroupKeyError(RecipeError):
    """A sample lacks the metadata key its recipe groups by."""

    def __init__(self, key: str) -> None:
        super().__init__(f"report metadata has no {key!r} (batching.group_by)")
        self.key = key
