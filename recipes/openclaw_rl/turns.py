"""From a joined sample to the judged turn ``openclaw_rl`` trains on (pure, no torch).

Rules, in order (a sample that breaks one is skipped with the reason in brackets):

1. The report was computed from a judgement (:mod:`reef.core.feedback`):
   ``metadata.source == "judge"`` [``not_judged``]; its score is +1 or -1
   [``score_not_unit``].
2. The judged turn (the sample's last: the report quotes that receipt) carries what the
   engine recorded when it generated: ``meta_info.input_ids``, ``output_ids`` and
   ``output_token_logprobs`` [``no_engine_logprobs``]. Nothing is re-tokenised.
3. With a hint (the report's feedback: the judge's hints, shortest first; the first is
   used) and ``distill_coef > 0``, every generated token needs the policy's recorded
   top-K ids, at least ``min_top_k`` of them (``meta_info.output_top_logprobs``: set
   ``REEF_RECORD_TOP_LOGPROBS``) [``no_top_logprobs``]. The teacher's prompt is the
   turn's messages with the hint appended to the last user message
   (:func:`hinted_messages`).
"""

from __future__ import annotations

from typing import Any

from recipes.errors import RolloutError
from recipes.openclaw_rl.training import JudgedTurn, OpenClawTraining
from recipes.samples import Sample, Turn
from recipes.sao.rollouts import recorded_tokens

#: ``metadata.source`` of a report computed from a judgement (reef.core.feedback.SOURCE)
JUDGE_SOURCE = "judge"
HINT_PREFIX = "Hint: "


def judged_turn(sample: Sample, options: OpenClawTraining) -> JudgedTurn:
    """The sample as one judged turn (raises RolloutError with the reason it is not)."""
    if sample.metadata.get("source") != JUDGE_SOURCE:
        raise RolloutError("not_judged", "the report was not computed from a judged turn")
    if sample.score not in (1.0, -1.0):
        raise RolloutError("score_not_unit", f"score {sample.score} is not +1 or -1")
    turn = sample.last()
    if turn is None:
        raise RolloutError("not_one_turn", "the sample has no recorded turn")
    prompt, output, logprobs = recorded_tokens(turn)
    hint = hint_of(sample.feedback) if options.distill_coef > 0 else None
    top: tuple[tuple[int, ...], ...] = ()
    teacher = None
    if hint is not None:
        top = recorded_top_ids(turn, len(output), options.min_top_k)
        teacher = tuple((m["role"], m["content"]) for m in hinted_messages(turn, hint))
    return JudgedTurn(
        prompt_ids=tuple(prompt),
        output_ids=tuple(output),
        logprobs=tuple(logprobs),
        top_ids=top,
        score=sample.score,
        teacher_messages=teacher,
    )


def hint_of(feedback: Any) -> str | None:
    """The hint a computed report carries: the first (shortest) non-empty one."""
    if isinstance(feedback, list):
        for hint in feedback:
            if isinstance(hint, str) and hint.strip():
                return hint.strip()
    return None


def recorded_top_ids(turn: Turn, generated: int, least: int) -> tuple[tuple[int, ...], ...]:
    """The recorded top-K ids per generated token (SGLang's ``[[logprob, id, text], ...]``)."""
    meta = turn.response.get("meta_info") if isinstance(turn.response, dict) else None
    entries = meta.get("output_top_logprobs") if isinstance(meta, dict) else None
    if not isinstance(entries, list) or len(entries) != generated:
        raise RolloutError(
            "no_top_logprobs",
            f"turn {turn.receipt} has no top-K record per generated token "
            "(set REEF_RECORD_TOP_LOGPROBS, or distill_coef: 0)",
        )
    try:
        ids = tuple(tuple(dict.fromkeys(int(e[1]) for e in step)) for step in entries)
    except (TypeError, ValueError, IndexError) as exc:
        raise RolloutError("no_top_logprobs", f"turn {turn.receipt}: unreadable top-K") from exc
    if any(len(step) < least for step in ids):
        raise RolloutError("no_top_logprobs", f"turn {turn.receipt}: fewer than {least} top ids")
    return ids


def hinted_messages(turn: Turn, hint: str) -> list[dict[str, str]]:
    """The turn's prompt with the hint appended to its last user message (or, with no
    user message, as a user message of its own)."""
    messages = [dict(m) for m in turn.messages()]
    for message in reversed(messages):
        if message["role"] == "user":
            message["content"] = f"{message['content']}\n\n{HINT_PREFIX}{hint}"
            return messages
    return [*messages, {"role": "user", "content": f"{HINT_PREFIX}{hint}"}]
