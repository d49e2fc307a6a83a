"""Pushing a committed release's weights to engines: the weights holder publishes.

With ``trainer_publish`` set, a candidate the chain committed as the scenario's new head
(not a pending release, not one held for a rollout) is published, from its candidate
folder and before that folder is removed, to every engine of
``trainer_publish_engines`` with the release id as the weight version:

- ``broadcast``: SGLang's weights group (:func:`reef.engine.broadcast.publish_weights`),
  NCCL when the recipe trains on a CUDA device, gloo otherwise;
- ``tensor``: SGLang's ``/update_weights_from_tensor``, engine by engine (an engine on
  this machine).

A LoRA adapter folder is not published (the sidecars load adapters with
``/load_lora_adapter``), nor a folder without safetensors weights: both are logged and
counted ``skipped``. A publish that fails is logged and counted ``failed``; it never fails
the candidate or the trainer: the sidecars (``engine_load_method: broadcast``) load the
release from disk when the push does not arrive. Torch is imported only when a publish
runs, in the trainer's worker thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from reef.core.errors import ConfigError, ReefError
from reef.settings import TrainerSettings
from trainers.chainview import ChainDecision

if TYPE_CHECKING:
    from torch import Tensor

logger = logging.getLogger("reef.trainer")

ADAPTER_MARKER = "adapter_config.json"

Outcome = Literal["ok", "failed", "skipped"]


@dataclass(frozen=True, slots=True)
class PublishConfig:
    method: Literal["broadcast", "tensor"]
    engines: tuple[str, ...]
    #: the recipe's ``training.device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``)
    device: str = "cpu"
    timeout_s: float = 60.0


def publish_config(trainer: TrainerSettings, device: str) -> PublishConfig | None:
    """The trainer's publishing, from the settings (None: it does not publish)."""
    if trainer.publish == "none":
        return None
    if not trainer.publish_engines:
        raise ConfigError(
            f"trainer_publish {trainer.publish!r} needs trainer_publish_engines "
            "(REEF_TRAINER_PUBLISH_ENGINES=http://host:port,...)"
        )
    return PublishConfig(
        trainer.publish,
        trainer.publish_engines,
        device,
        trainer.publish_timeout_s,
    )


def training_device(recipe_config: object) -> str:
    """The recipe's ``training.device``; ``cpu`` for a recipe that has none (e.g. gepa)."""
    device = getattr(getattr(recipe_config, "training", None), "device", "cpu")
    return device if isinstance(device, str) else "cpu"


def publishes(decision: ChainDecision, *, pending: bool) -> bool:
    """Whether the decision made the candidate the scenario's serving head."""
    return decision.committed and not pending and decision.release_id is not None


def backend_for(device: str) -> Literal["gloo", "nccl"]:
    """The group's backend for weights on ``device`` (a resolved torch device)."""
    return "nccl" if device.startswith("cuda") else "gloo"


def unpublishable(folder: Path) -> str | None:
    """Why ``folder`` is not pushed to engines (None: it is)."""
    if (folder / ADAPTER_MARKER).exists():
        return "a LoRA adapter (the sidecars load it with /load_lora_adapter)"
    if not any(folder.glob("*.safetensors")):
        return "no safetensors weights"
    return None


class Publisher:
    """Publishes one committed candidate folder at a time (blocking: call it in a thread)."""

    def __init__(self, config: PublishConfig) -> None:
        self.config = config

    def publish(self, folder: Path, release_id: str) -> Outcome:
        reason = unpublishable(folder)
        if reason is not None:
            logger.info("not publishing %s to engines: %s", release_id, reason)
            return "skipped"
        try:
            self._send(folder, release_id)
        # RuntimeError: torch.distributed's own failures outside publish_weights' steps
        except (ReefError, OSError, RuntimeError) as exc:
            logger.warning(
                "publishing %s by %s failed (the sidecars load it from disk): %s",
                release_id,
                self.config.method,
                exc,
            )
            return "failed"
        logger.info(
            "published %s by %s to %d engine(s)",
            release_id,
            self.config.method,
            len(self.config.engines),
        )
        return "ok"

    def _send(self, folder: Path, release_id: str) -> None:
        from reef.modelkit.weights import read_safetensors_dir

        tensors = read_safetensors_dir(folder)
        if self.config.method == "broadcast":
            from recipes.training import resolve_device
            from reef.engine.broadcast import publish_weights
            from trainers.backends.devices import cuda_count

            backend = backend_for(resolve_device(self.config.device, cuda_count()))
            publish_weights(
                tensors,
                self.config.engines,
                release_id,
                backend=backend,
                timeout_s=self.config.timeout_s,
            )
            return
        self._send_tensors(sorted(tensors.items()), release_id)

    def _send_tensors(self, named: list[tuple[str, Tensor]], release_id: str) -> None:
        from reef.engine.engine_client import EngineClient
        from reef.engine.errors import WeightPublishError

        for url in self.config.engines:
            with EngineClient(url, timeout_s=self.config.timeout_s) as client:
                result = client.update_weights_from_tensor(named, release_id)
            if not result.success:
                raise WeightPublishError(f"{url} refused the tensors: {result.message}")
