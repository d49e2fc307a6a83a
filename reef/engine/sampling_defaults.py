"""The sampling a request leaves out: the model folder's defaults, then the API's.

A model folder's ``generation_config.json`` names the sampling its authors recommend
(Qwen2.5-Instruct: temperature 0.7, top-p 0.8, top-k 20). As SGLang with
``--sampling-defaults model`` and vLLM with ``--generation-config auto``, the engine uses
those for every field a request omits, on every route; a field the file does not set
falls back to OpenAI's and Anthropic's defaults (temperature 1, top-p 1, no top-k).
``--sampling-defaults openai`` ignores the file.

A request's own value always wins. The file's ``do_sample: false`` means greedy decoding
(temperature 0), as transformers' ``generate`` reads it. Reef's decoder has no
repetition penalty, so the file's ``repetition_penalty`` is not read.

Torch-free and pure: :func:`defaults_of` reads the file's parsed JSON; the loader
(:func:`reef.engine.loader.generation_defaults`) reads the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

#: ``--sampling-defaults``: the model folder's generation config, or the API's constants
SamplingDefaultsSource = Literal["model", "openai"]
SAMPLING_DEFAULTS_SOURCES: Final[tuple[SamplingDefaultsSource, ...]] = ("model", "openai")

#: OpenAI's and Anthropic's defaults (SGLang's ``SamplingParams`` has the same)
API_TEMPERATURE: Final = 1.0
API_TOP_P: Final = 1.0
#: no top-k cut
API_TOP_K: Final = -1


@dataclass(frozen=True, slots=True)
class SamplingDefaults:
    """The model's sampling for fields a request omits; None: the file does not set it."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None

    def temperature_for(self, asked: float | None) -> float:
        """The request's temperature, else the model's, else the API's."""
        return _first(asked, self.temperature, API_TEMPERATURE)

    def top_p_for(self, asked: float | None) -> float:
        return _first(asked, self.top_p, API_TOP_P)

    def top_k_for(self, asked: int | None) -> int:
        return int(_first(asked, self.top_k, API_TOP_K))


#: what a folder without a generation config (and ``--sampling-defaults openai``) gives
NO_MODEL_DEFAULTS: Final = SamplingDefaults()


def _first(asked: float | None, model: float | None, api: float) -> float:
    if asked is not None:
        return asked
    return api if model is None else model


def _number(values: Mapping[str, Any], key: str) -> float | None:
    value = values.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def defaults_of(generation_config: Mapping[str, Any]) -> SamplingDefaults:
    """The sampling defaults a ``generation_config.json`` sets (its parsed JSON): only
    the numbers it holds; ``do_sample: false`` makes the temperature 0."""
    top_k = _number(generation_config, "top_k")
    greedy = generation_config.get("do_sample") is False
    return SamplingDefaults(
        temperature=0.0 if greedy else _number(generation_config, "temperature"),
        top_p=_number(generation_config, "top_p"),
        top_k=None if top_k is None else int(top_k),
    )
