"""Gate policies: select a candidate or leave the current release serving.

Every policy fails closed: a custom gate that raises, or returns something that is not a
:class:`Decision` or a bool, rejects the candidate.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator

from recipes.errors import RecipeConfigError
from recipes.strict import StrictModel

GATE_POLICIES = ("always", "floor", "win_margin")


class GateConfig(StrictModel):
    """Whether a candidate is selected."""

    policy: str = Field(default="always", description="always | floor | win_margin | pkg.mod:func")
    floor: float = Field(default=0.0, description="floor: the lowest selected candidate score.")
    margin: float = Field(
        default=0.0, description="win_margin: the least improvement over the head."
    )

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value in GATE_POLICIES or ":" in value:
            return value
        raise ValueError(f"unknown gate policy {value!r} (always, floor, win_margin, pkg.mod:func)")


@dataclass(frozen=True, slots=True)
class Evaluation:
    """An evaluator's verdict on one folder (candidate or current release)."""

    evaluator: str
    score: float
    metrics: dict[str, float] = field(default_factory=dict)
    details: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"evaluator": self.evaluator, "score": self.score, "metrics": self.metrics}


@dataclass(frozen=True, slots=True)
class Decision:
    """The gate's answer; ``reason`` is shown in logs, status and the proposal."""

    selected: bool
    policy: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"selected": self.selected, "policy": self.policy, "reason": self.reason}


def decide(config: GateConfig, candidate: Evaluation, baseline: Evaluation | None) -> Decision:
    """Apply ``config.policy`` to the candidate's evaluation (and the head's, when needed)."""
    if config.policy == "always":
        return Decision(True, "always", "always selects")
    if config.policy == "floor":
        return _floor(config, candidate)
    if config.policy == "win_margin":
        return _win_margin(config, candidate, baseline)
    return _custom(config, candidate, baseline)


def _floor(config: GateConfig, candidate: Evaluation) -> Decision:
    ok = candidate.score >= config.floor
    relation = ">=" if ok else "<"
    return Decision(ok, "floor", f"score {candidate.score:.4f} {relation} floor {config.floor}")


def _win_margin(config: GateConfig, candidate: Evaluation, baseline: Evaluation | None) -> Decision:
    if baseline is None:
        return Decision(False, "win_margin", "no baseline evaluation of the current release")
    gain = candidate.score - baseline.score
    # a strictly positive win is required even with margin 0: a tie keeps the head
    ok = gain >= config.margin and gain > 0
    return Decision(
        ok,
        "win_margin",
        f"score {candidate.score:.4f} vs head {baseline.score:.4f} "
        f"(gain {gain:+.4f}, margin {config.margin})",
    )


def load_callable(path: str) -> Callable[..., Any]:
    """``pkg.mod:attr`` → the attribute; RecipeConfigError when it cannot be imported."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise RecipeConfigError(f"{path!r} is not a dotted path 'pkg.mod:name'")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RecipeConfigError(f"cannot import {path!r}: {exc}") from exc
    if not callable(target):
        raise RecipeConfigError(f"{path!r} is not callable")
    return target  # type: ignore[no-any-return]


def _custom(config: GateConfig, candidate: Evaluation, baseline: Evaluation | None) -> Decision:
    try:
        answer = load_callable(config.policy)(candidate, baseline, config)
    except Exception as exc:  # a custom gate's failure rejects (fails closed)
        return Decision(False, config.policy, f"gate failed: {type(exc).__name__}: {exc}")
    if isinstance(answer, Decision):
        return answer
    if isinstance(answer, bool):
        return Decision(
            answer, config.policy, "custom gate " + ("selects" if answer else "rejects")
        )
    return Decision(False, config.policy, f"gate returned {type(answer).__name__}, not a Decision")
