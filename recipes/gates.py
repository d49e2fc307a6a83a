"""Gate policies: select a candidate or leave the current release serving.

Every policy fails closed: a custom gate that raises, or returns something that is not a
:class:`Decision` or a bool, rejects the candidate.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from recipes.base import Decision, Evaluation, GateConfig
from recipes.errors import RecipeConfigError


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
