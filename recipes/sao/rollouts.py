"""From a joined sample to the one scored rollout ``sao`` trains on (pure, no torch).

Rules:

1. Every turn of the sample must carry what the engine recorded when it generated:
   ``meta_info.input_ids``, ``output_ids`` and ``output_token_logprobs`` (SGLang and
   ``reef engine`` answer with them when the request asks for logprobs; the
   ``record_tokens`` setting asks for every chat request). Nothing is re-tokenised and
   no logprob is recomputed: a turn without them raises :class:`MissingLogprobsError`.
2. The turns must be *one* trajectory: each turn's prompt extends the previous turn's
   prompt and answer token for token. The tokens between (a tool result, a user reply,
   the chat template's markers) are observations: action mask 0, no advantage. Turns
   that do not chain are several rollouts under one score: refused (``not_one_rollout``).
3. The score must be finite; it rewards the last generated token.
4. A step trains at most one rollout per prompt (:func:`distinct_prompt_steps`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

from recipes.errors import MissingLogprobsError, RolloutError
from recipes.samples import Sample, Turn
from recipes.sao.training import SaoTraining, ScoredRollout

#: (prompt ids, output ids, generation-time logprobs) of one turn
Recorded = tuple[list[int], list[int], list[float]]


def recorded_tokens(turn: Turn) -> Recorded:
    """The engine's token record of one turn; MissingLogprobsError when it has none."""
    meta = turn.response.get("meta_info") if isinstance(turn.response, dict) else None
    if not isinstance(meta, dict):
        raise MissingLogprobsError(f"turn {turn.receipt} has no engine meta_info")
    prompt, output, logprobs = (
        meta.get("input_ids"),
        meta.get("output_ids"),
        meta.get("output_token_logprobs"),
    )
    if not (isinstance(prompt, list) and isinstance(output, list) and isinstance(logprobs, list)):
        raise MissingLogprobsError(
            f"turn {turn.receipt} lacks input_ids, output_ids or output_token_logprobs"
        )
    if not prompt or not output or len(logprobs) != len(output):
        raise MissingLogprobsError(f"turn {turn.receipt}: empty or misaligned token record")
    try:
        return [int(t) for t in prompt], [int(t) for t in output], [_logprob(e) for e in logprobs]
    except (TypeError, ValueError, IndexError) as exc:
        raise MissingLogprobsError(f"turn {turn.receipt}: unreadable token record") from exc


def _logprob(entry: Any) -> float:
    """SGLang's ``[logprob, token_id, text]`` or a bare number; finite."""
    value = float(entry[0] if isinstance(entry, list) else entry)
    if not math.isfinite(value):
        raise ValueError(f"logprob {value}")
    return value


def chain(turns: Sequence[Recorded]) -> tuple[list[int], list[int], list[float]]:
    """(token ids, action mask, logprobs) of turns that form one trajectory."""
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for prompt, output, recorded in turns:
        if prompt[: len(ids)] != ids:
            raise RolloutError(
                "not_one_rollout", "a turn's prompt does not extend the previous turn"
            )
        observed = prompt[len(ids) :]
        ids += observed + output
        mask += [0] * len(observed) + [1] * len(output)
        logprobs += [0.0] * len(observed) + recorded
    return ids, mask, logprobs


def rollout_of(sample: Sample, options: SaoTraining) -> ScoredRollout:
    """The sample as one scored rollout (raises RolloutError with the reason it is not)."""
    if not sample.turns:
        raise RolloutError("not_one_rollout", "the sample has no recorded turn")
    if sample.score is None:
        raise RolloutError("no_score", "the report gave feedback without a score")
    if not math.isfinite(sample.score):
        raise RolloutError("score_not_finite", f"score {sample.score}")
    recorded = [recorded_tokens(turn) for turn in sample.turns]
    ids, mask, logprobs = chain(recorded)
    first_prompt = recorded[0][0]
    return ScoredRollout(
        token_ids=tuple(ids),
        action_mask=tuple(mask),
        logprobs=tuple(logprobs),
        score=sample.score,
        prompt_key=hashlib.sha256(repr(first_prompt).encode()).hexdigest()[:16],
        lam=options.policy_lambda(sum(mask)),
    )


def distinct_prompt_steps(rollouts: Sequence[ScoredRollout]) -> list[list[ScoredRollout]]:
    """Optimiser steps with one rollout per prompt each: step k holds the k-th rollout of
    every prompt that has one (arrival order kept), so nothing is dropped and no step
    sees the same prompt twice."""
    seen: dict[str, int] = {}
    steps: list[list[ScoredRollout]] = []
    for rollout in rollouts:
        index = seen.get(rollout.prompt_key, 0)
        seen[rollout.prompt_key] = index + 1
        if index == len(steps):
            steps.append([])
        steps[index].append(rollout)
    return steps
