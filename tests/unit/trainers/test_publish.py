"""What the trainer publishes to engines, and how its settings are read (no engine)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reef.core.errors import ConfigError
from reef.settings import TrainerSettings, load_settings
from tests.support.trainer_harness import Harness, until
from trainers.chainview import ChainDecision
from trainers.publish import (
    Outcome,
    PublishConfig,
    Publisher,
    backend_for,
    publish_config,
    publishes,
    training_device,
    unpublishable,
)

ENGINES = "http://10.0.0.1:30000, http://10.0.0.2:30000"


def test_the_engines_are_read_from_a_comma_separated_environment_variable() -> None:
    loaded = load_settings(
        environ={"REEF_TRAINER_PUBLISH": "broadcast", "REEF_TRAINER_PUBLISH_ENGINES": ENGINES}
    ).settings
    assert loaded.trainer.publish_engines == ("http://10.0.0.1:30000", "http://10.0.0.2:30000")
    config = publish_config(loaded.trainer, "cuda:1")
    assert config == PublishConfig(
        "broadcast", loaded.trainer.publish_engines, "cuda:1", loaded.trainer.publish_timeout_s
    )


def test_the_engines_are_read_from_a_yaml_list(tmp_path: Path) -> None:
    path = tmp_path / "reef.yaml"
    path.write_text("reef:\n  trainer:\n    publish: tensor\n    publish_engines: [http://a:1]\n")
    loaded = load_settings(config_file=path, environ={}).settings
    assert (loaded.trainer.publish, loaded.trainer.publish_engines) == ("tensor", ("http://a:1",))


def test_no_publishing_by_default_and_a_method_without_engines_is_refused() -> None:
    assert publish_config(TrainerSettings(), "cpu") is None
    with pytest.raises(ConfigError, match="trainer_publish_engines"):
        publish_config(TrainerSettings(publish="broadcast"), "cpu")
    with pytest.raises(ConfigError, match="engine_load_method"):
        load_settings(environ={"REEF_ENGINE_LOAD_METHOD": "carrier-pigeon"})


@pytest.mark.parametrize(
    ("decision", "pending", "expected"),
    [
        (ChainDecision(committed=True, release_id="r1"), False, True),
        (ChainDecision(committed=True, release_id="r1"), True, False),  # held or kept
        (ChainDecision(committed=False, reason="stale_parent"), False, False),
    ],
)
def test_only_a_release_committed_as_the_head_is_published(
    decision: ChainDecision, pending: bool, expected: bool
) -> None:
    assert publishes(decision, pending=pending) is expected


def test_nccl_on_a_cuda_device_gloo_elsewhere() -> None:
    assert [backend_for(d) for d in ("cuda:0", "cuda:3", "cpu")] == ["nccl", "nccl", "gloo"]


def test_the_training_device_comes_from_the_recipe() -> None:
    recipe = SimpleNamespace(training=SimpleNamespace(device="cuda:1"))
    assert training_device(recipe) == "cuda:1"
    assert training_device(SimpleNamespace()) == "cpu"  # a recipe that does not train torch


def test_adapters_and_folders_without_weights_are_not_published(tmp_path: Path) -> None:
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    (tmp_path / "adapter" / "adapter_model.safetensors").write_bytes(b"")
    (tmp_path / "prompt").mkdir()
    (tmp_path / "prompt" / "prompt.json").write_text("{}")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "model.safetensors").write_bytes(b"")
    assert "load_lora_adapter" in (unpublishable(tmp_path / "adapter") or "")
    assert unpublishable(tmp_path / "prompt") == "no safetensors weights"
    assert unpublishable(tmp_path / "full") is None
    publisher = Publisher(PublishConfig("broadcast", ("http://127.0.0.1:9",)))
    assert publisher.publish(tmp_path / "adapter", "r1") == "skipped"
    assert publisher.publish(tmp_path / "prompt", "r2") == "skipped"


class FailingPublisher(Publisher):
    """The real publishing step with a send that fails as an unreachable engine would."""

    def __init__(self) -> None:
        super().__init__(PublishConfig("tensor", ("http://127.0.0.1:9",)))
        self.calls: list[tuple[str, bool]] = []

    def publish(self, folder: Path, release_id: str) -> Outcome:
        self.calls.append((release_id, folder.is_dir()))  # before the folder is removed
        return "failed"


async def test_the_trainer_publishes_each_committed_head_and_goes_on_when_it_fails(
    harness: Harness, running: Any
) -> None:
    r0 = await harness.create("s")
    for _ in range(4):
        await harness.sample("s", r0)
    publisher = FailingPublisher()
    trainer = harness.trainer(
        {"batching": {"batch_size": 2}, "eligibility": {"max_staleness": 5}}, publisher=publisher
    )
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["accepted"] == 2)
        await until(lambda: trainer.status()["publishes"]["failed"] == 2)
    committed = [c.release_id for c in await harness.committed()]
    assert publisher.calls == [(committed[0], True), (committed[1], True)]
    assert trainer.status()["publishes"] == {"ok": 0, "failed": 2, "skipped": 0}
