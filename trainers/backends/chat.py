"""The HTTP chat client behind :class:`recipes.chat.ChatClient` (httpx, blocking)."""

from __future__ import annotations

from typing import Any

import httpx

from recipes.chat import ChatEndpoint
from recipes.errors import RecipeError


class HttpChatClient:
    """POSTs OpenAI ``/chat/completions`` requests; one connection per call."""

    def complete(
        self, endpoint: ChatEndpoint, messages: list[dict[str, str]], *, max_tokens: int
    ) -> str:
        """The answer's text; RecipeError on any transport, status or shape problem."""
        body: dict[str, Any] = {
            "model": endpoint.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": max_tokens,
        }
        if endpoint.seed is not None:
            body["seed"] = endpoint.seed
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        timeout = httpx.Timeout(endpoint.timeout_s, connect=min(10.0, endpoint.timeout_s))
        url = endpoint.url
        try:
            with httpx.Client(timeout=timeout) as client:
                response = client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise RecipeError(f"upstream {url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise RecipeError(
                f"upstream {url} answered {response.status_code}: {response.text[:300]}"
            )
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise RecipeError(f"upstream {url}: not a chat completion") from exc
        if not isinstance(content, str):
            raise RecipeError(f"upstream {url}: the answer has no text content")
        return content
