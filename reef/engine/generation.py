"""Token-by-token decoding with a KV cache, per-token logprobs and stop conditions.

Runs in a worker thread on one module for the whole request (the caller passes the
module of one weight snapshot). Temperature 0 is greedy (argmax) and deterministic.
Logprobs are those of the model's raw distribution (before temperature / top-p), as
SGLang returns them by default.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import torch

from reef.engine.errors import ContextTooLongError

#: temperatures below this decode greedily
GREEDY_BELOW: Final = 1e-5


@dataclass(frozen=True, slots=True)
class Sampling:
    """What a request asks of the decoder (SGLang's ``sampling_params``, resolved)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One generated token."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(slots=True)
class Completion:
    """The result of one generation."""

    prompt_ids: list[int]
    steps: list[Step] = field(default_factory=list)
    input_logprobs: list[float | None] = field(default_factory=list)
    #: "stop" or "length" (or "abort" when the caller cancelled)
    finish_type: str = "length"
    #: the eos / stop token id, or the stop string, that ended the generation
    matched: int | str | None = None

    @property
    def output_ids(self) -> list[int]:
        return [step.token_id for step in self.steps]


def _cache_argument(model: torch.nn.Module) -> str:
    """``cache`` (transformers ≥ 5.2x) or ``past_key_values``: the forward's name for it."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _pick(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> int:
    if sampling.temperature < GREEDY_BELOW:
        return int(torch.argmax(logits).item())
    scaled = logits / sampling.temperature
    if sampling.top_k > 0:
        kth = torch.topk(scaled, min(sampling.top_k, scaled.numel())).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        beyond = torch.cumsum(sorted_probs, dim=-1) - sorted_probs > sampling.top_p
        sorted_probs = sorted_probs.masked_fill(beyond, 0.0)
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def _top(logprobs: torch.Tensor, count: int) -> tuple[tuple[int, float], ...]:
    if count <= 0:
        return ()
    values, ids = torch.topk(logprobs, min(count, logprobs.numel()))
    return tuple((int(i), float(v)) for i, v in zip(ids.tolist(), values.tolist(), strict=True))


def _input_logprobs(logits: torch.Tensor, prompt_ids: Sequence[int]) -> list[float | None]:
    logprobs = torch.log_softmax(logits[0, :-1].float(), dim=-1)
    targets = torch.tensor(prompt_ids[1:], device=logits.device).unsqueeze(1)
    picked = logprobs.gather(1, targets).squeeze(1).tolist()
    return [None, *picked]


class Decoder:
    """Generates from one module; ``eos_ids`` end a generation unless ``ignore_eos``."""

    def __init__(self, model: torch.nn.Module, *, eos_ids: frozenset[int], context: int) -> None:
        self.model = model
        self.eos_ids = eos_ids
        self.context = context
        self._cache_arg = _cache_argument(model)
        self._device = next(model.parameters()).device

    @torch.inference_mode()
    def generate(
        self,
        prompt_ids: Sequence[int],
        sampling: Sampling,
        *,
        decode: Callable[[list[int]], str],
        top_logprobs: int = 0,
        input_logprobs: bool = False,
        on_step: Callable[[Step], bool] | None = None,
    ) -> Completion:
        """Decode until eos, a stop token or string, ``max_new_tokens`` or the context end.

        ``on_step`` sees every token as it is produced; returning False aborts.
        """
        if not prompt_ids:
            raise ContextTooLongError("the prompt is empty")
        if len(prompt_ids) >= self.context:
            raise ContextTooLongError(
                f"the prompt has {len(prompt_ids)} tokens; the context window is {self.context}"
            )
        budget = min(sampling.max_new_tokens, self.context - len(prompt_ids))
        generator = None
        if sampling.seed is not None:
            generator = torch.Generator(device=self._device).manual_seed(sampling.seed)
        completion = Completion(prompt_ids=list(prompt_ids))
        inputs = torch.tensor([list(prompt_ids)], device=self._device)
        cache: Any = None
        for index in range(budget):
            output = self.model(inputs, **{self._cache_arg: cache}, use_cache=True)
            cache = output[self._cache_arg]
            if index == 0 and input_logprobs:
                completion.input_logprobs = _input_logprobs(output.logits, prompt_ids)
            logits = output.logits[0, -1].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            token = _pick(logits, sampling, generator)
            step = Step(token, float(logprobs[token]), _top(logprobs, top_logprobs))
            completion.steps.append(step)
            if on_step is not None and not on_step(step):
                completion.finish_type = "abort"
                return completion
            if self._finished(completion, sampling, decode):
                return completion
            inputs = torch.tensor([[token]], device=self._device)
        return completion

    def _finished(
        self, completion: Completion, sampling: Sampling, decode: Callable[[list[int]], str]
    ) -> bool:
        token = completion.steps[-1].token_id
        if token in sampling.stop_token_ids or (token in self.eos_ids and not sampling.ignore_eos):
            completion.finish_type, completion.matched = "stop", token
            return True
        if sampling.stop:
            text = decode(completion.output_ids)
            for stop in sampling.stop:
                if stop and stop in text:
                    completion.finish_type, completion.matched = "stop", stop
                    return True
        return False
