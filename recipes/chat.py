"""The chat port: how a recipe asks an OpenAI-compatible model (``harness_evolve``).

The recipe decides *where* to ask (a :class:`ChatEndpoint`: URL, model, key, timeout,
seed) and *what*; the transport is a :class:`ChatClient` injected by whoever builds the
recipe (the registry binds :class:`trainers.backends.chat.HttpChatClient`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class ChatEndpoint:
    """An OpenAI-compatible ``/chat/completions`` endpoint and how to call it."""

    url: str
    model: str
    api_key: str | None
    timeout_s: float
    seed: int | None = None

    @classmethod
    def at(
        cls,
        base_url: str,
        model: str,
        api_key: str | None,
        *,
        timeout_s: float,
        seed: int | None = None,
    ) -> ChatEndpoint:
        """The endpoint under ``base_url`` (e.g. ``https://api.example/v1``)."""
        return cls(base_url.rstrip("/") + "/chat/completions", model, api_key, timeout_s, seed)


@runtime_checkable
class ChatClient(Protocol):
    """A blocking chat client (recipes run in worker threads)."""

    def complete(
        self, endpoint: ChatEndpoint, messages: list[dict[str, str]], *, max_tokens: int
    ) -> str:
        """The answer's text at temperature 0 (with ``endpoint.seed`` when set);
        :class:`recipes.errors.RecipeError` on any transport, status or shape problem."""
        ...


@runtime_checkable
class ChatBound(Protocol):
    """A recipe that talks to a model through a :class:`ChatClient`."""

    def bind_chat(self, client: ChatClient) -> None: ...
