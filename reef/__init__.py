"""Reef: continual-learning infrastructure for LLM agents, event-sourced over Kafka."""

__version__ = "0.1.0"
