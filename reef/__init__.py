"""Reef: continual-learning infrastructure for LLM agents, event-sourced over Kafka.

``reef.__version__`` is the installed distribution's version (pyproject.toml is the one
place it is set), looked up on first use so that importing Reef does not load
``importlib.metadata``.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'reef' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reef")
    except PackageNotFoundError:  # a source tree on sys.path that pip never installed
        return "0+unknown"
