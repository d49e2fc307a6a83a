"""The model kit: what both the serving engine and the trainers build models from.

The built-in tiny character model (:mod:`reef.modelkit.tiny`), weights as immutable
values (:mod:`reef.modelkit.weights`) and LoRA adapters merged into a new module
(:mod:`reef.modelkit.adapters`). It sits below :mod:`reef.engine` and
:mod:`trainers.backends` and imports neither; its failures are the engine errors of
:mod:`reef.modelkit.errors` (drawn in :mod:`reef.engine.errors`).

This ``__init__`` imports nothing heavy (``reef.modelkit.errors`` is torch-free); the
other modules need torch.
"""
