"""The engine's settings: one frozen object, built by the CLI (or a test) and passed down."""

from __future__ import annotations

from dataclasses import dataclass

from reef.engine.sampling_defaults import SamplingDefaultsSource


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """How one local engine process serves."""

    #: a built-in model name (``tiny``, ``tiny-100m``) or a Hugging Face folder
    model: str = "tiny"
    host: str = "127.0.0.1"
    port: int = 30000
    #: the weight version reported until the first update names another
    weight_version: str = "default"
    #: ``cpu`` or ``cuda`` (``cuda:N``)
    device: str = "cpu"
    #: the model id of ``/v1/models`` (default: ``model``)
    served_model_name: str | None = None
    #: generations running at once; further requests wait their turn
    max_concurrency: int = 4
    #: seconds a weight-update group rendezvous or broadcast may block
    group_timeout_s: float = 300.0
    #: ``max_new_tokens`` when a request gives none (SGLang's default)
    default_max_new_tokens: int = 128
    #: SGLang's ``--sampling-defaults``: what a request's omitted temperature, top-p and
    #: top-k become; ``model``: the folder's ``generation_config.json``, then the API's
    #: defaults; ``openai``: the API's (:mod:`reef.engine.sampling_defaults`)
    sampling_defaults: SamplingDefaultsSource = "model"
    #: SGLang's ``--tool-call-parser`` (``qwen25``, ``hermes``, ``llama3``, ``pythonic``);
    #: unset: the built-in models' ``pythonic``, and no parsing for a model folder
    tool_call_parser: str | None = None
    log_level: str = "info"

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model
