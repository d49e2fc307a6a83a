"""The served model as a sequence of immutable snapshots, swapped atomically.

Read side: a request calls :meth:`EngineModel.snapshot` once and runs entirely on that
snapshot's module, so it sees one weight version from its first token to its last.

Write side (one update at a time, under ``_updating``):

1. read and check the new weights (names, shapes) against the current base;
2. build the new module(s) off to the side (:func:`reef.modelkit.weights.with_weights`,
   :func:`reef.modelkit.adapters.merge_adapter`) — requests keep running meanwhile;
3. publish: assign the new snapshot under ``_lock`` — one reference, so a request sees
   either all of the old version (module + ``weight_version``) or all of the new one.

A failure in steps 1 or 2 raises before 3: nothing is swapped and the old weights keep serving.

``update_weights_from_disk`` also accepts a built-in model name (``tiny``): the engine
rebuilds those weights (the same in every process), so a base release of the built-in
model can be restored without a folder.

LoRA rule: ``load_lora_adapter`` adds a *named* adapter (used by requests that name it
in ``lora_path`` / ``model``), what Reef's sidecar loads an adapter release as (SGLang's
protocol). Reef's extension, which no Reef component uses: ``update_weights_from_disk``
with a PEFT adapter folder sets the *default* adapter: requests that name none are served
by ``base ⊕ adapter``. The base is kept, so the next adapter replaces the previous one
instead of stacking on it; a full-weights update replaces the base, clears the default
adapter and re-merges every named adapter onto the new base (from its folder).

A request resolves its adapter on the snapshot it runs on (:meth:`Snapshot.resolve`), so
an adapter unloaded while the request runs keeps serving it to its last token.

Named slots (Reef's extension, what a canary release is served from): a named adapter
may also be a full-weights folder, a second model beside the base that no base update
touches; and one loaded with a ``weight_version`` reports that version in the answers it
serves (otherwise an answer reports the snapshot's, as SGLang does).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from reef.engine.errors import AdapterError, WeightLoadError
from reef.engine.sampling_defaults import NO_MODEL_DEFAULTS, SamplingDefaults
from reef.modelkit.adapters import merge_adapter
from reef.modelkit.tiny import BUILTIN_MODELS, build_model
from reef.modelkit.weights import (
    check_compatible,
    check_dtypes,
    complete_tied,
    is_adapter_dir,
    read_safetensors_dir,
    with_weights,
)


def _read_weights(path: str, load_format: str | None) -> dict[str, torch.Tensor]:
    """A folder's safetensors, or the weights of a built-in model name (``tiny``)."""
    if path in BUILTIN_MODELS and not Path(path).exists():
        return dict(build_model(BUILTIN_MODELS[path]).state_dict())
    return read_safetensors_dir(path, load_format)


@dataclass(frozen=True, slots=True)
class Adapter:
    """A named LoRA adapter, merged onto the base of its snapshot."""

    name: str
    path: str
    pinned: bool
    model: torch.nn.Module
    #: what the answers it serves report (None: the snapshot's version)
    weight_version: str | None = None
    #: a full-weights slot (independent of the base), not an adapter merged onto it
    full: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One weight version: everything a request needs; never mutated."""

    weight_version: str
    base: torch.nn.Module
    #: ``base ⊕ default adapter``, or ``base``
    model: torch.nn.Module
    default_adapter: str | None = None
    adapters: Mapping[str, Adapter] = field(default_factory=lambda: MappingProxyType({}))

    def module_for(self, adapter: str | None) -> torch.nn.Module:
        """The module serving requests that name ``adapter`` (``None``: the default)."""
        if adapter is None:
            return self.model
        found = self.adapters.get(adapter)
        if found is None:
            raise AdapterError(f"LoRA adapter {adapter!r} is not loaded")
        return found.model

    def resolve(self, adapter: str | None, release: str | None = None) -> str | None:
        """The adapter that serves a request naming ``adapter`` (SGLang's ``lora_path``)
        and routed by Reef's API to ``release`` (``x-reef-serve-release``), decided on
        this snapshot: a named adapter must be loaded, unless it is the routed release
        (not loaded yet, or any more: the default serves, as for a slot); a routed release
        that is loaded serves a request naming none."""
        if adapter is None:
            return release if release is not None and release in self.adapters else None
        if adapter not in self.adapters and adapter == release:
            return None
        return adapter

    def version_for(self, adapter: str | None) -> str:
        """The weight version an answer served by ``adapter`` reports."""
        found = None if adapter is None else self.adapters.get(adapter)
        if found is None or found.weight_version is None:
            return self.weight_version
        return found.weight_version


class EngineModel:
    """Holds the tokenizer, the folder's sampling defaults and the current
    :class:`Snapshot`; applies updates."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        model_path: str,
        weight_version: str,
        sampling_defaults: SamplingDefaults = NO_MODEL_DEFAULTS,
    ) -> None:
        self.tokenizer = tokenizer
        self.model_path = model_path
        #: what the loaded folder's generation config sets; weight updates keep it
        self.sampling_defaults = sampling_defaults
        self.device = next(model.parameters()).device
        self._lock = threading.Lock()
        self._updating = threading.Lock()
        self._current = Snapshot(weight_version, model.eval(), model.eval())

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._current

    @property
    def weight_version(self) -> str:
        return self.snapshot().weight_version

    def loaded_adapters(self) -> dict[str, str]:
        """Adapter name → path, as SGLang's ``loaded_adapters``."""
        return {name: adapter.path for name, adapter in self.snapshot().adapters.items()}

    def _publish(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._current = snapshot

    def update_from_disk(
        self, path: str, *, weight_version: str | None, load_format: str | None = None
    ) -> str:
        """Full weights (safetensors folder) or a PEFT adapter folder (default adapter)."""
        with self._updating:
            current = self.snapshot()
            version = weight_version or current.weight_version
            if is_adapter_dir(path):
                merged = merge_adapter(current.base, path)
                self._publish(
                    replace(
                        current, weight_version=version, model=merged, default_adapter=str(path)
                    )
                )
                return f"Succeeded to update model weights (default LoRA adapter {path})."
            tensors = complete_tied(current.base, _read_weights(path, load_format))
            check_compatible(current.base.state_dict(), tensors)
            self._publish(self._rebased(current, with_weights(current.base, tensors), version))
            return "Succeeded to update model weights."

    def update_from_tensors(
        self,
        tensors: Mapping[str, torch.Tensor],
        *,
        weight_version: str | None,
        exact_dtypes: bool = False,
    ) -> str:
        """Replace the named base tensors (all, or one bucket of them) in one swap;
        ``exact_dtypes`` refuses a tensor whose dtype differs instead of casting it."""
        with self._updating:
            current = self.snapshot()
            version = weight_version or current.weight_version
            if exact_dtypes:
                state = current.base.state_dict()
                check_compatible(state, tensors, partial=True)
                check_dtypes(state, tensors)
            base = with_weights(current.base, tensors)
            self._publish(self._rebased(current, base, version))
            return f"Succeeded to update {len(tensors)} parameters."

    @staticmethod
    def _rebased(current: Snapshot, base: torch.nn.Module, version: str) -> Snapshot:
        adapters = {
            name: adapter
            if adapter.full
            else replace(adapter, model=merge_adapter(base, adapter.path))
            for name, adapter in current.adapters.items()
        }
        return Snapshot(version, base, base, None, MappingProxyType(adapters))

    def load_adapter(
        self, name: str, path: str, *, pinned: bool = False, weight_version: str | None = None
    ) -> dict[str, str]:
        """Add the named adapter (a PEFT folder merged onto the base), or a full-weights
        slot (a weights folder, or a built-in model name); returns the loaded adapters."""
        if not name:
            raise AdapterError("lora_name must not be empty")
        with self._updating:
            current = self.snapshot()
            if name in current.adapters:
                raise AdapterError(f"LoRA adapter {name!r} is already loaded")
            full = not is_adapter_dir(path)
            if full:
                try:
                    tensors = complete_tied(current.base, _read_weights(path, None))
                except WeightLoadError as exc:
                    raise AdapterError(f"not a PEFT adapter nor a weights folder: {exc}") from exc
                check_compatible(current.base.state_dict(), tensors)
                module = with_weights(current.base, tensors)
            else:
                module = merge_adapter(current.base, Path(path))
            adapter = Adapter(name, path, pinned, module, weight_version, full)
            adapters = {**current.adapters, name: adapter}
            self._publish(replace(current, adapters=MappingProxyType(adapters)))
        return self.loaded_adapters()

    def unload_adapter(self, name: str) -> dict[str, str]:
        with self._updating:
            current = self.snapshot()
            if name not in current.adapters:
                raise AdapterError(f"LoRA adapter {name!r} is not loaded")
            adapters = {key: value for key, value in current.adapters.items() if key != name}
            self._publish(replace(current, adapters=MappingProxyType(adapters)))
        return self.loaded_adapters()
