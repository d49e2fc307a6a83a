"""Engine processes on loopback and the weight sets the tests swap between.

``running_engine`` starts ``python -m reef.engine.cli`` (what ``reef engine`` runs) as a
real process and waits for ``GET /health``. Weight folders are built once per session.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.servers import (
    HOST,
    ManagedProcess,
    ProcessStartError,
    clean_env,
    free_port,
    spawn,
)

#: a prompt whose greedy continuation differs between the weight sets below
PROMPT = "return exactly: hello"


@dataclass
class EngineProcess:
    url: str
    managed: ManagedProcess

    def stop(self) -> int:
        return self.managed.stop()


def start_engine(log_dir: Path, *args: str, timeout: float = 90.0) -> EngineProcess:
    port = free_port()
    argv = [sys.executable, "-m", "reef.engine.cli", "--host", HOST, "--port", str(port), *args]
    managed = spawn(argv, env=clean_env(), log_dir=log_dir, name=f"engine-{port}")
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if not managed.running():
                raise ProcessStartError(f"the engine exited during start-up\n{managed.output()}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{url}/health").status_code == 200:
                    return EngineProcess(url, managed)
            time.sleep(0.2)
    managed.stop()
    raise ProcessStartError(f"the engine did not get healthy\n{managed.output()}")


@contextlib.contextmanager
def running_engine(log_dir: Path, *args: str) -> Iterator[EngineProcess]:
    engine = start_engine(log_dir, *args)
    try:
        yield engine
    finally:
        engine.stop()


@dataclass(frozen=True)
class WeightSets:
    """Folders of the tiny model: A = the built-in seed, B = another seed, an adapter."""

    seed_a: Path
    seed_b: Path
    adapter: Path
    mismatched: Path


@pytest.fixture(scope="session")
def weight_sets(tmp_path_factory: pytest.TempPathFactory) -> WeightSets:
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file

    from reef.engine import tiny

    root = tmp_path_factory.mktemp("weights")
    seed_a = tiny.save_tiny(root / "a")
    seed_b = tiny.save_tiny(root / "b", seed=1)
    config = LoraConfig(
        r=4,
        lora_alpha=64,
        target_modules=["q_proj", "v_proj", "o_proj", "down_proj"],
        init_lora_weights=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        peft_model = get_peft_model(tiny.build_model(), config)
    peft_model.save_pretrained(root / "adapter")
    state = {k: v.contiguous() for k, v in tiny.build_model().state_dict().items()}
    state["lm_head.weight"] = torch.zeros(3, 64)
    (root / "mismatched").mkdir()
    save_file(state, root / "mismatched" / "model.safetensors")
    return WeightSets(seed_a, seed_b, root / "adapter", root / "mismatched")


def greedy(client: httpx.Client, url: str, *, max_new_tokens: int = 16, **extra: object) -> dict:
    body = {
        "text": PROMPT,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
        **extra,
    }
    response = client.post(f"{url}/generate", json=body)
    response.raise_for_status()
    return response.json()
