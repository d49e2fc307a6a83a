"""Loading a release folder by tensor: SGLang's ``/update_weights_from_tensor``.

Imports torch (it reads the folder's safetensors and pickles tensors); only a sidecar
configured with ``engine_load_method: tensor`` imports it. The tensors stay alive, in
this process, until the engine has answered: it reads them during the call.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from reef.engine.engine_client import AsyncEngineClient, UpdateResult
from reef.modelkit.weights import read_safetensors_dir


async def update_from_folder(
    engine: AsyncEngineClient, folder: Path, weight_version: str
) -> UpdateResult:
    """Send every tensor of ``folder`` (a full-weights release) to ``engine`` in one update."""
    tensors = await asyncio.to_thread(read_safetensors_dir, folder)
    return await engine.update_weights_from_tensor(sorted(tensors.items()), weight_version)
