"""Naming the routed release's LoRA adapter in what the API forwards (SGLang's protocol).

The sidecar loads an adapter release into its engine with ``/load_lora_adapter`` under
the release id (:mod:`reef.sidecar.runner`); the engine's default weights stay the base.
So every exchange the API routes to an adapter release names that adapter the way SGLang
selects one per request: the ``lora_path`` field of ``/v1/chat/completions`` (SGLang's
``ChatCompletionRequest``; Reef's API serves no text-completions route), set to the
release id (a shadow copy names its candidate's the same way). A release whose
weights are not an adapter (full weights, the base) is named by nothing: the engine's
default weights serve it.

Whether a release is an adapter is read once from its content's manifest (immutable, so
the answer is cached by content id).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from reef.artifacts.content import ContentStore
from reef.artifacts.parts import is_adapter_manifest
from reef.core.errors import ReefError

logger = logging.getLogger(__name__)

#: the routes whose SGLang request body has a ``lora_path`` field
LORA_ROUTES: Final = frozenset({"/v1/chat/completions"})


class AdapterKinds:
    """Whether each content's weights are a LoRA adapter, read from its manifest once."""

    def __init__(self, content: ContentStore) -> None:
        self._content = content
        self._known: dict[str, bool] = {}

    async def adapter_of(self, route: str, release_id: str, content_id: str) -> str | None:
        """The adapter name to put in ``lora_path`` for an exchange routed to
        ``release_id`` (its id when its weights are an adapter), or None."""
        if route not in LORA_ROUTES:
            return None
        known = self._known.get(content_id)
        if known is None:
            try:
                manifest = await asyncio.to_thread(self._content.load, content_id)
            except (ReefError, OSError) as exc:
                # the engine's default weights answer, and the receipt names what served
                logger.warning("release %s: cannot read its manifest (%s)", release_id, exc)
                return None
            known = self._known[content_id] = is_adapter_manifest(manifest)
        return release_id if known else None
