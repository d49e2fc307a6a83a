"""Request bodies of the engine's HTTP API, field for field as SGLang v0.5.15.post1.

Torch-free. Unknown fields are ignored, so a client written for a neighbouring SGLang
version (which adds fields such as ``is_async`` or ``token_step``) still works.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class UpdateWeightFromDiskReqInput(_Request):
    model_path: str
    load_format: str | None = None
    abort_all_requests: bool = False
    weight_version: str | None = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    flush_cache: bool = True


class InitWeightsUpdateGroupReqInput(_Request):
    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    group_name: str = "weight_update_group"
    backend: str = "nccl"


class UpdateWeightsFromDistributedReqInput(_Request):
    names: list[str]
    dtypes: list[str]
    shapes: list[list[int]]
    group_name: str = "weight_update_group"
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None
    load_format: str | None = None


class UpdateWeightsFromTensorReqInput(_Request):
    #: one entry per TP rank: base64 of ``MultiprocessingSerializer.serialize(named_tensors)``
    serialized_named_tensors: list[str]
    load_format: str | None = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None
    disable_draft_model: bool | None = None
    torch_empty_cache: bool = False


class DestroyWeightsUpdateGroupReqInput(_Request):
    group_name: str = "weight_update_group"


class LoadLoRAAdapterReqInput(_Request):
    lora_name: str
    lora_path: str
    pinned: bool = False
    #: assigned by SGLang's TokenizerManager; accepted and not used
    lora_id: str | None = None
    #: Reef's extension: the weight version the slot's answers report (a canary release);
    #: unset, they report the base's, as SGLang does
    weight_version: str | None = None


class UnloadLoRAAdapterReqInput(_Request):
    lora_name: str
    lora_id: str | None = None


class SamplingParams(_Request):
    max_new_tokens: int | None = None
    #: unset: the model's default, else SGLang's (1.0, 1.0, -1): see
    #: :mod:`reef.engine.sampling_defaults`
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    sampling_seed: int | None = None


class GenerateReqInput(_Request):
    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    lora_path: str | None = None
    rid: str | None = None


class ChatMessage(_Request):
    #: kept whole: ``tool_calls``, ``tool_call_id`` and ``name`` reach the conversation model
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The content as text (the text parts of a list, joined)."""
        if isinstance(self.content, list):
            return "".join(str(part.get("text", "")) for part in self.content)
        return self.content or ""


class StreamOptions(_Request):
    include_usage: bool = False


class ChatCompletionRequest(_Request):
    model: str = ""
    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    n: int = 1
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    seed: int | None = None
    #: SGLang's extensions: the LoRA adapter to serve this request with; keep going past eos
    lora_path: str | None = None
    ignore_eos: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
