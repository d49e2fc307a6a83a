"""Reef's local serving engine: SGLang's HTTP control API over a transformers model.

This package's ``__init__`` imports nothing heavy: :mod:`reef.engine.engine_client` and
:mod:`reef.engine.protocol` are torch-free, so Reef's API and sidecar can import them
without torch installed. Everything that needs torch lives in the other modules.
"""
