"""Typed clients of an engine's control API (SGLang v0.5.15.post1 or ``reef engine``).

Torch-free. Each call is described once (method, path, body, how to read the answer);
:class:`EngineClient` (sync, httpx) and :class:`AsyncEngineClient` (asyncio) execute
the same descriptions. An engine that *refuses* an update answers ``success: false``
(HTTP 400), which is returned as a result; a transport failure, a timeout, another
status or a body that is not the expected JSON raises :class:`EngineUnavailableError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import httpx

from reef.engine.errors import EngineUnavailableError

if TYPE_CHECKING:
    from torch import Tensor

T = TypeVar("T")

DEFAULT_TIMEOUT_S: Final = 300.0
_ANSWERED: Final = (200, 400)


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """``GET /get_model_info``."""

    model_path: str
    tokenizer_path: str | None
    is_generation: bool
    weight_version: str | None
    preferred_sampling_params: Any = None
    has_image_understanding: bool = False
    has_audio_understanding: bool = False


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """``{success, message[, num_paused_requests]}`` of the weight-update routes."""

    success: bool
    message: str
    num_paused_requests: int = 0


@dataclass(frozen=True, slots=True)
class LoRAResult:
    """``{success, error_message, loaded_adapters}`` of the LoRA routes."""

    success: bool
    error_message: str | None
    loaded_adapters: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One control request and the reader of its answer."""

    method: str
    path: str
    body: dict[str, Any] | None
    read: Callable[[httpx.Response], T]


def _json(response: httpx.Response, answered: tuple[int, ...] = _ANSWERED) -> dict[str, Any]:
    if response.status_code not in answered:
        raise EngineUnavailableError(
            f"{response.request.method} {response.request.url}: HTTP {response.status_code}: "
            f"{response.text[:300]}"
        )
    try:
        body = response.json()
    except ValueError as exc:
        raise EngineUnavailableError(
            f"{response.request.url}: not JSON: {response.text[:300]}"
        ) from exc
    if not isinstance(body, dict):
        raise EngineUnavailableError(f"{response.request.url}: expected an object, got {body!r}")
    return body


def _update(response: httpx.Response) -> UpdateResult:
    body = _json(response)
    return UpdateResult(
        success=bool(body.get("success")),
        message=str(body.get("message", "")),
        num_paused_requests=int(body.get("num_paused_requests") or 0),
    )


def _lora(response: httpx.Response) -> LoRAResult:
    body = _json(response)
    adapters = body.get("loaded_adapters") or {}
    return LoRAResult(
        success=bool(body.get("success")),
        error_message=body.get("error_message"),
        loaded_adapters={str(k): str(v) for k, v in adapters.items()},
    )


def _model_info(response: httpx.Response) -> ModelInfo:
    body = _json(response, answered=(200,))
    try:
        return ModelInfo(
            model_path=str(body["model_path"]),
            tokenizer_path=body.get("tokenizer_path"),
            is_generation=bool(body["is_generation"]),
            weight_version=body.get("weight_version"),
            preferred_sampling_params=body.get("preferred_sampling_params"),
            has_image_understanding=bool(body.get("has_image_understanding")),
            has_audio_understanding=bool(body.get("has_audio_understanding")),
        )
    except KeyError as exc:
        raise EngineUnavailableError(f"model info lacks {exc}: {body!r}") from exc


def _adapters(response: httpx.Response) -> dict[str, str]:
    """``GET /v1/models``: the cards with a ``parent`` are the loaded adapters, name →
    path (Reef's engine; SGLang's card for an adapter is taken to carry ``parent`` too,
    as recalled from its ``available_models``: not read in its source nor run here)."""
    cards = _json(response, answered=(200,)).get("data")
    if not isinstance(cards, list):
        raise EngineUnavailableError(f"/v1/models lacks a data list: {cards!r}")
    return {
        str(card["id"]): str(card.get("root") or "")
        for card in cards
        if isinstance(card, dict) and card.get("parent") is not None and "id" in card
    }


def _ok(response: httpx.Response) -> bool:
    return response.status_code == 200


# -- the calls ----------------------------------------------------------------------


def health() -> Call[bool]:
    return Call("GET", "/health", None, _ok)


def model_info() -> Call[ModelInfo]:
    return Call("GET", "/get_model_info", None, _model_info)


def loaded_adapters() -> Call[dict[str, str]]:
    return Call("GET", "/v1/models", None, _adapters)


def flush_cache() -> Call[bool]:
    return Call("POST", "/flush_cache", None, _ok)


def update_weights_from_disk(
    path: str, weight_version: str | None = None, *, load_format: str | None = None
) -> Call[UpdateResult]:
    body = {"model_path": path, "weight_version": weight_version, "load_format": load_format}
    return Call("POST", "/update_weights_from_disk", body, _update)


def update_weights_from_tensor(
    serialized_named_tensors: list[str],
    weight_version: str | None = None,
    *,
    load_format: str | None = None,
) -> Call[UpdateResult]:
    """``serialized_named_tensors``: one entry per TP rank (:mod:`reef.engine.tensor_wire`)."""
    body = {
        "serialized_named_tensors": serialized_named_tensors,
        "load_format": load_format,
        "flush_cache": True,
        "abort_all_requests": False,
        "weight_version": weight_version,
    }
    return Call("POST", "/update_weights_from_tensor", body, _update)


def serialized(named_tensors: Sequence[tuple[str, Tensor]], tp_size: int = 1) -> list[str]:
    """SGLang's client side: the same serialized entry for each of ``tp_size`` ranks.

    The serializer needs torch, which the rest of this module does not: it is imported
    here, by the callers that hold tensors.
    """
    from reef.engine.tensor_wire import serialize_named_tensors

    return [serialize_named_tensors(named_tensors) for _ in range(tp_size)]


def load_lora_adapter(
    name: str, path: str, *, pinned: bool = False, weight_version: str | None = None
) -> Call[LoRAResult]:
    body: dict[str, Any] = {"lora_name": name, "lora_path": path, "pinned": pinned}
    if weight_version is not None:  # Reef's engine only (a named slot's version)
        body["weight_version"] = weight_version
    return Call("POST", "/load_lora_adapter", body, _lora)


def unload_lora_adapter(name: str) -> Call[LoRAResult]:
    return Call("POST", "/unload_lora_adapter", {"lora_name": name}, _lora)


def init_weights_update_group(
    master_address: str,
    master_port: int,
    rank_offset: int,
    world_size: int,
    *,
    group_name: str,
    backend: str,
) -> Call[UpdateResult]:
    body = {
        "master_address": master_address,
        "master_port": master_port,
        "rank_offset": rank_offset,
        "world_size": world_size,
        "group_name": group_name,
        "backend": backend,
    }
    return Call("POST", "/init_weights_update_group", body, _update)


def update_weights_from_distributed(
    names: list[str],
    dtypes: list[str],
    shapes: list[list[int]],
    *,
    group_name: str,
    weight_version: str | None,
) -> Call[UpdateResult]:
    body = {
        "names": names,
        "dtypes": dtypes,
        "shapes": shapes,
        "group_name": group_name,
        "flush_cache": True,
        "weight_version": weight_version,
    }
    return Call("POST", "/update_weights_from_distributed", body, _update)


def destroy_weights_update_group(group_name: str) -> Call[UpdateResult]:
    return Call("POST", "/destroy_weights_update_group", {"group_name": group_name}, _update)


# -- executors ----------------------------------------------------------------------


def _transport_error(call: Call[Any], exc: httpx.HTTPError) -> EngineUnavailableError:
    return EngineUnavailableError(f"{call.method} {call.path}: {type(exc).__name__}: {exc}")


class EngineClient:
    """Blocking client: ``EngineClient("http://127.0.0.1:30000").model_info()``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport)

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def call(self, call: Call[T]) -> T:
        try:
            response = self._http.request(call.method, call.path, json=call.body)
        except httpx.HTTPError as exc:
            raise _transport_error(call, exc) from exc
        return call.read(response)

    def health(self) -> bool:
        return self.call(health())

    def model_info(self) -> ModelInfo:
        return self.call(model_info())

    def flush_cache(self) -> bool:
        return self.call(flush_cache())

    def update_weights_from_disk(
        self, path: str, weight_version: str | None = None
    ) -> UpdateResult:
        return self.call(update_weights_from_disk(path, weight_version))

    def update_weights_from_tensor(
        self,
        named_tensors: Sequence[tuple[str, Tensor]],
        weight_version: str | None = None,
        *,
        load_format: str | None = None,
        tp_size: int = 1,
    ) -> UpdateResult:
        """Hand tensors on this machine to the engine (CUDA tensors by IPC handle)."""
        entries = serialized(named_tensors, tp_size)
        call = update_weights_from_tensor(entries, weight_version, load_format=load_format)
        return self.call(call)

    def load_lora_adapter(self, name: str, path: str, *, pinned: bool = False) -> LoRAResult:
        return self.call(load_lora_adapter(name, path, pinned=pinned))

    def unload_lora_adapter(self, name: str) -> LoRAResult:
        return self.call(unload_lora_adapter(name))


class AsyncEngineClient:
    """The same calls for asyncio services (the sidecar, Reef's upstream)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(call.method, call.path, json=call.body)
        except httpx.HTTPError as exc:
            raise _transport_error(call, exc) from exc
        return call.read(response)

    async def health(self) -> bool:
        return await self.call(health())

    async def model_info(self) -> ModelInfo:
        return await self.call(model_info())

    async def flush_cache(self) -> bool:
        return await self.call(flush_cache())

    async def loaded_adapters(self) -> dict[str, str]:
        """Adapter name → path of the LoRA adapters the engine holds."""
        return await self.call(loaded_adapters())

    async def update_weights_from_disk(
        self, path: str, weight_version: str | None = None
    ) -> UpdateResult:
        return await self.call(update_weights_from_disk(path, weight_version))

    async def update_weights_from_tensor(
        self,
        named_tensors: Sequence[tuple[str, Tensor]],
        weight_version: str | None = None,
        *,
        load_format: str | None = None,
        tp_size: int = 1,
    ) -> UpdateResult:
        """Hand tensors on this machine to the engine; ``named_tensors`` must stay alive
        (and unchanged) until this returns."""
        entries = await asyncio.to_thread(serialized, named_tensors, tp_size)
        call = update_weights_from_tensor(entries, weight_version, load_format=load_format)
        return await self.call(call)

    async def load_lora_adapter(
        self, name: str, path: str, *, pinned: bool = False, weight_version: str | None = None
    ) -> LoRAResult:
        return await self.call(
            load_lora_adapter(name, path, pinned=pinned, weight_version=weight_version)
        )

    async def unload_lora_adapter(self, name: str) -> LoRAResult:
        return await self.call(unload_lora_adapter(name))
