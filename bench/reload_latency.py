"""Reload latency: from "a new version is decided" to "the engine serves it".

An engine (``python -m reef.cli.engine``, what ``reef engine`` runs) serves the built-in
tiny model (~109k parameters) and, in a second round, a ~101M-parameter model built
from config (random weights, ``--model tiny-100m``). The clock starts when the new
weights exist in the trainer's memory and stops at the first ``/generate`` answer (one
token) whose ``meta_info.weight_version`` is the new version. Methods:

- ``disk``: the trainer writes its model (``save_pretrained``) to a fresh folder, then
  ``POST /update_weights_from_disk``;
- ``lora-default``: the trainer writes a PEFT adapter (``save_pretrained``), then
  ``POST /update_weights_from_disk`` with the adapter folder (it becomes the default);
- ``lora-named``: the same adapter through ``POST /load_lora_adapter`` (the answer comes
  from a request naming it; the previous adapter is unloaded afterwards, off the clock);
- ``broadcast``: :func:`reef.engine.broadcast.publish_weights` over gloo (group
  rendezvous, metadata, one broadcast per tensor, group teardown);
- ``restart`` (the comparison): write the folder, start a new engine process on it,
  first answer — what a deployment without hot reload pays.

Each reload alternates between two weight sets so every one really changes the weights.
Columns are medians over ``--repeats`` (restart: one run).

    .venv/bin/python bench/reload_latency.py [--repeats 5] [--sizes tiny,100m]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from peft import LoraConfig, get_peft_model

from reef.engine.broadcast import publish_weights
from reef.modelkit import tiny
from reef.testing.servers import HOST, ManagedProcess, clean_env, free_port, spawn

MODEL_FOR: dict[tiny.Size, str] = {"tiny": "tiny", "100m": "tiny-100m"}


@dataclass
class Timing:
    write_s: float
    engine_s: float
    answer_s: float

    @property
    def total_s(self) -> float:
        return self.write_s + self.engine_s + self.answer_s


def start_engine(model: str, log_dir: Path) -> tuple[ManagedProcess, str, float]:
    """(process, url, seconds until /health answered)."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "reef.cli.engine",
        "--host",
        HOST,
        "--port",
        str(port),
        "--model",
        model,
        "--log-level",
        "warning",
    ]
    started = time.perf_counter()
    managed = spawn(argv, env=clean_env(), log_dir=log_dir, name=f"engine-{port}")
    url = f"http://{HOST}:{port}"
    with httpx.Client(timeout=2.0) as client:
        while time.perf_counter() - started < 300:
            if not managed.running():
                raise RuntimeError(managed.output())
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return managed, url, time.perf_counter() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    managed.stop()
    raise RuntimeError(f"engine did not start\n{managed.output()}")


def first_answer(client: httpx.Client, url: str, version: str, adapter: str | None = None) -> None:
    body = {
        "text": "hi",
        "sampling_params": {"max_new_tokens": 1, "temperature": 0},
        "lora_path": adapter,
    }
    while True:
        answer = client.post(f"{url}/generate", json=body).json()
        if answer["meta_info"]["weight_version"] == version or adapter is not None:
            return


def post_ok(client: httpx.Client, url: str, body: dict[str, object]) -> None:
    answer = client.post(url, json=body).json()
    if not answer.get("success"):
        raise RuntimeError(f"{url}: {answer}")


class Bench:
    """One engine of one size; each method returns the timing of one reload."""

    def __init__(self, size: tiny.Size, workdir: Path, client: httpx.Client) -> None:
        self.size, self.workdir, self.client = size, workdir, client
        self.models = [tiny.build_model(size, seed=seed) for seed in (0, 1)]
        self.adapters = [_peft_model(self.models[0], seed) for seed in (0, 1)]
        self.count = 0
        self.url = ""
        self.adapter: str | None = None

    def _next(self) -> tuple[torch.nn.Module, str, Path]:
        self.count += 1
        folder = self.workdir / f"r{self.count}"
        return self.models[self.count % 2], f"r{self.count}", folder

    def disk(self) -> Timing:
        model, version, folder = self._next()
        t0 = time.perf_counter()
        model.save_pretrained(folder)
        t1 = time.perf_counter()
        post_ok(
            self.client,
            f"{self.url}/update_weights_from_disk",
            {"model_path": str(folder), "weight_version": version},
        )
        t2 = time.perf_counter()
        first_answer(self.client, self.url, version)
        return Timing(t1 - t0, t2 - t1, time.perf_counter() - t2)

    def _adapter(self, folder: Path) -> None:
        self.adapters[self.count % 2].save_pretrained(folder)

    def lora_default(self) -> Timing:
        _, version, folder = self._next()
        t0 = time.perf_counter()
        self._adapter(folder)
        t1 = time.perf_counter()
        post_ok(
            self.client,
            f"{self.url}/update_weights_from_disk",
            {"model_path": str(folder), "weight_version": version},
        )
        t2 = time.perf_counter()
        first_answer(self.client, self.url, version)
        return Timing(t1 - t0, t2 - t1, time.perf_counter() - t2)

    def lora_named(self) -> Timing:
        _, name, folder = self._next()
        t0 = time.perf_counter()
        self._adapter(folder)
        t1 = time.perf_counter()
        post_ok(
            self.client,
            f"{self.url}/load_lora_adapter",
            {"lora_name": name, "lora_path": str(folder)},
        )
        t2 = time.perf_counter()
        first_answer(self.client, self.url, name, adapter=name)
        timing = Timing(t1 - t0, t2 - t1, time.perf_counter() - t2)
        if self.adapter is not None:
            post_ok(self.client, f"{self.url}/unload_lora_adapter", {"lora_name": self.adapter})
        self.adapter = name
        return timing

    def broadcast(self) -> Timing:
        model, version, _ = self._next()
        t0 = time.perf_counter()
        publish_weights(model, [self.url], version, timeout_s=120)
        t1 = time.perf_counter()
        first_answer(self.client, self.url, version)
        return Timing(0.0, t1 - t0, time.perf_counter() - t1)

    def restart(self, log_dir: Path) -> Timing:
        model, _, folder = self._next()
        t0 = time.perf_counter()
        model.save_pretrained(folder)
        tiny.build_tokenizer().save_pretrained(folder)
        t1 = time.perf_counter()
        managed, url, _ = start_engine(str(folder), log_dir)
        t2 = time.perf_counter()
        try:
            first_answer(self.client, url, "default")
        finally:
            managed.stop()
        return Timing(t1 - t0, t2 - t1, time.perf_counter() - t2)


def _peft_model(base: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A rank-16 LoRA on the attention projections (random, non-zero), around a copy."""
    config = LoraConfig(
        r=16,
        lora_alpha=32,
        init_lora_weights=False,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(copy.deepcopy(base), config)


def run_size(size: tiny.Size, repeats: int, root: Path) -> list[tuple[str, list[Timing]]]:
    workdir = root / size
    workdir.mkdir()
    with httpx.Client(timeout=600.0) as client:
        bench = Bench(size, workdir, client)
        managed, bench.url, startup = start_engine(MODEL_FOR[size], root / "logs")
        params = tiny.parameter_count(bench.models[0])
        print(f"{size}: {params:,} parameters; engine start-up {startup:.1f}s", flush=True)
        methods: dict[str, Callable[[], Timing]] = {
            "disk": bench.disk,
            "lora-default": bench.lora_default,
            "lora-named": bench.lora_named,
            "broadcast": bench.broadcast,
        }
        rows = []
        try:
            for name, method in methods.items():
                method()  # warm-up (first peft import, first group) is not counted
                rows.append((name, [method() for _ in range(repeats)]))
        finally:
            managed.stop()
        rows.append(("restart", [bench.restart(root / "logs")]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", default="tiny,100m")
    args = parser.parse_args()
    header = (
        f"| {'model':<5} | {'method':<12} | {'write ms':>9} | {'engine ms':>9} | "
        f"{'answer ms':>9} | {'total ms':>9} | {'min total':>9} |"
    )
    lines = [header, "|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|"]
    with tempfile.TemporaryDirectory(prefix="reef-reload-") as tmp:
        for size in args.sizes.split(","):
            for method, timings in run_size(size, args.repeats, Path(tmp)):  # type: ignore[arg-type]
                med = {
                    k: statistics.median(getattr(t, k) for t in timings) * 1000
                    for k in ("write_s", "engine_s", "answer_s", "total_s")
                }
                best = min(t.total_s for t in timings) * 1000
                lines.append(
                    f"| {size:<5} | {method:<12} | {med['write_s']:>9.1f} | {med['engine_s']:>9.1f}"
                    f" | {med['answer_s']:>9.1f} | {med['total_s']:>9.1f} | {best:>9.1f} |"
                )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
