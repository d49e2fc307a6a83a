"""Errors of the serving engine (a subtree of :class:`reef.core.errors.ReefError`).

    ReefError
    └── EngineError                 the local engine, its control API or a client of it
        ├── WeightLoadError         new weights could not be loaded; the old ones keep serving
        │   └── ModelFolderError    a model folder lacks a chat template or its tokenizer
        │                           does not fit its embeddings (reef.modelkit.folders)
        ├── ContextTooLongError     a prompt is empty or does not fit the context window
        ├── AdapterError            a LoRA adapter could not be loaded, unloaded or found
        ├── WeightsGroupError       the weight-update process group could not be joined or used
        ├── WeightPublishError      the trainer side of a weight broadcast failed
        └── EngineUnavailableError  an engine could not be reached or answered nonsense

``EngineError``, ``WeightLoadError``, ``ModelFolderError`` and ``AdapterError`` are defined in
:mod:`reef.modelkit.errors` (the model kit below the engine raises them) and imported
here: this module is where the engine's errors are imported from.

The engine answers every control request with SGLang's ``{success: false, message}``
shape instead of raising past its routes; clients raise these on transport errors.
"""

from __future__ import annotations

from reef.modelkit.errors import AdapterError, EngineError, ModelFolderError, WeightLoadError

__all__ = [
    "AdapterError",
    "ContextTooLongError",
    "EngineError",
    "EngineUnavailableError",
    "ModelFolderError",
    "WeightLoadError",
    "WeightPublishError",
    "WeightsGroupError",
]


class ContextTooLongError(EngineError):
    """The prompt is empty or does not fit the model's context window."""


class WeightsGroupError(EngineError):
    """The weight-update process group could not be created, used or destroyed."""


class WeightPublishError(EngineError):
    """Publishing weights to engines over a process group failed."""


class EngineUnavailableError(EngineError):
    """An engine could not be reached, timed out, or answered with an unexpected body."""
