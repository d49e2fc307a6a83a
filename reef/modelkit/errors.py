"""The errors the model kit raises; the engine's error tree (drawn in
:mod:`reef.engine.errors`, which re-exports them) grows from :class:`EngineError`.

Torch-free: Reef's API and sidecar import :mod:`reef.engine.errors`, hence this module,
without torch installed.
"""

from __future__ import annotations

from reef.core.errors import ReefError


class EngineError(ReefError):
    """The serving engine or a client of its control API failed."""


class WeightLoadError(EngineError):
    """New weights were rejected (missing path, name or shape mismatch); nothing was swapped."""


class ModelFolderError(WeightLoadError):
    """A model folder cannot be served or trained as a chat model: its tokenizer has no
    chat template, or does not fit the model's embeddings."""


class AdapterError(EngineError):
    """A LoRA adapter could not be loaded, unloaded, or is not loaded."""
