"""From request bodies to :class:`Sampling`, and from a :class:`Completion` to SGLang fields.

Shared by the native (``/generate``) and the OpenAI (``/v1/chat/completions``) routes.
Sampling a request omits comes from the model's defaults
(:mod:`reef.engine.sampling_defaults`), as on the Anthropic and Responses routes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from reef.engine.generation import Completion, Sampling
from reef.engine.protocol import ChatCompletionRequest, SamplingParams
from reef.engine.sampling_defaults import NO_MODEL_DEFAULTS, SamplingDefaults


def stops(stop: Any) -> tuple[str, ...]:
    """A request's stop strings (one string, a list, or none)."""
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list):
        return tuple(str(s) for s in stop if s)
    return ()


def native_sampling(params: SamplingParams, default_max_new_tokens: int) -> Sampling:
    """SGLang ``sampling_params`` → :class:`Sampling`. As in SGLang, the model's sampling
    defaults apply to the OpenAI-style routes only: what a native request omits of
    temperature, top-p and top-k is SGLang's own default (1.0, 1.0, -1)."""
    defaults = NO_MODEL_DEFAULTS
    return Sampling(
        max_new_tokens=(
            default_max_new_tokens if params.max_new_tokens is None else params.max_new_tokens
        ),
        temperature=defaults.temperature_for(params.temperature),
        top_p=defaults.top_p_for(params.top_p),
        top_k=defaults.top_k_for(params.top_k),
        stop=stops(params.stop),
        stop_token_ids=frozenset(params.stop_token_ids or ()),
        ignore_eos=params.ignore_eos,
        seed=params.sampling_seed,
    )


def chat_sampling(
    request: ChatCompletionRequest, default_max_new_tokens: int, defaults: SamplingDefaults
) -> Sampling:
    """OpenAI chat parameters → :class:`Sampling`; what they omit of temperature, top-p and
    top-k comes from ``defaults`` (the model's, then OpenAI's: temperature 1)."""
    limit = request.max_completion_tokens or request.max_tokens
    return Sampling(
        max_new_tokens=default_max_new_tokens if limit is None else limit,
        temperature=defaults.temperature_for(request.temperature),
        top_p=defaults.top_p_for(request.top_p),
        top_k=defaults.top_k_for(request.top_k),
        stop=stops(request.stop),
        ignore_eos=request.ignore_eos,
        seed=request.seed,
    )


def finish_reason(completion: Completion) -> dict[str, Any]:
    """SGLang's ``meta_info.finish_reason``."""
    if completion.finish_type == "stop":
        return {"type": "stop", "matched": completion.matched}
    if completion.finish_type == "abort":
        return {"type": "abort", "message": "aborted"}
    return {"type": "length", "length": len(completion.steps)}


def visible_text(text: str, sampling: Sampling, completion: Completion | None) -> str:
    """What may be shown of ``text`` so far: cut at a matched stop string, and while
    generating, minus a tail that could still become a stop string."""
    if completion is not None:
        matched = completion.matched
        if isinstance(matched, str) and matched in text:
            return text[: text.index(matched)]
        return text
    hold = max((len(stop) for stop in sampling.stop), default=1) - 1
    return text[: len(text) - hold] if hold else text


def token_logprobs(
    completion: Completion, token_text: Callable[[int], str] | None
) -> list[list[Any]]:
    """``[[logprob, token_id, text or null], …]`` of the output tokens."""
    return [
        [step.logprob, step.token_id, token_text(step.token_id) if token_text else None]
        for step in completion.steps
    ]


def native_meta_info(
    rid: str,
    version: str,
    completion: Completion,
    *,
    return_logprob: bool,
    top_logprobs_num: int,
    token_text: Callable[[int], str] | None,
    latency_s: float,
) -> dict[str, Any]:
    """``meta_info`` of a ``/generate`` response."""
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": finish_reason(completion),
        "prompt_tokens": len(completion.prompt_ids),
        "completion_tokens": len(completion.steps),
        "cached_tokens": 0,
        "weight_version": version,
        "e2e_latency": latency_s,
    }
    if return_logprob:
        meta["input_token_logprobs"] = [
            [lp, token, token_text(token) if token_text else None]
            for lp, token in zip(completion.input_logprobs, completion.prompt_ids, strict=False)
        ]
        meta["output_token_logprobs"] = token_logprobs(completion, token_text)
        if top_logprobs_num > 0:
            meta["output_top_logprobs"] = [
                [[lp, token, token_text(token) if token_text else None] for token, lp in step.top]
                for step in completion.steps
            ]
    return meta


def usage(completion: Completion) -> Mapping[str, int]:
    prompt, output = len(completion.prompt_ids), len(completion.steps)
    return {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}
