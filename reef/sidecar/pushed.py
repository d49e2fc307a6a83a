"""Waiting for a release the weights holder pushes: ``engine_load_method`` broadcast or
pushed_tensor.

The trainer that got a release committed as the head pushes its weights to the engines
itself (:mod:`trainers.publish`: ``trainer_publish`` broadcast or tensor); the sidecar
does not send them. On a new head it polls the engine's ``weight_version`` for at most
``wait_s``: the engine reporting the release id means the push arrived (the sidecar
records the method its setting names: ``broadcast``, or ``tensor`` for pushed_tensor);
the wait running out (the trainer does not publish, or its publish failed) means the
sidecar loads the release from disk as with ``disk`` (``method`` disk). Torch-free.
"""

from __future__ import annotations

import asyncio
import time

from reef.engine.engine_client import AsyncEngineClient

POLL_SECONDS = 0.1
#: ``engine_load_method`` values that wait for a push → the ``EngineLoaded.method`` recorded
PUSHED_METHODS = {"broadcast": "broadcast", "pushed_tensor": "tensor"}


async def pushed(
    engine: AsyncEngineClient, weight_version: str, wait_s: float, poll_s: float = POLL_SECONDS
) -> bool:
    """Whether ``engine`` reports ``weight_version`` within ``wait_s`` (checked at least
    once); an engine that does not answer raises, as any other load step would."""
    deadline = time.monotonic() + wait_s
    while True:
        if (await engine.model_info()).weight_version == weight_version:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(min(poll_s, max(deadline - time.monotonic(), 0.0)))
