"""Hot reload under load: by disk, by LoRA and by gloo broadcast, 8 requests always in flight.

Greedy decoding makes each weight set's output for a fixed prompt a fingerprint. A
calibration pass records the fingerprint of every weight set (per request kind); then 8
client threads keep requests in flight (buffered ``/generate`` and streamed chat
completions) while the test reloads the engine four times, alternating weight sets,
each under a new weight version. Every response must succeed, carry a version, and
its output must be the fingerprint of the weights that version names — a mixed or
mislabelled response would match neither. Requests started after a reload returned
must see that reload (or a later one); requests that ended before it must not. At the
start, middle and end of every reload, (nearly) all 8 clients have a request in flight.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import torch  # noqa: F401  (installed by the bootstrap: a missing torch fails here)

from tests.support.engine import PROMPT, WeightSets, running_engine

pytestmark = pytest.mark.slow

CLIENTS = 8
RELOADS = 4
MAX_NEW_TOKENS = 32
KINDS = ("generate", "chat-stream")


@dataclass(frozen=True)
class Observed:
    kind: str
    version: str
    output: tuple[int, ...]
    started: float
    ended: float


def _probe_generate(client: httpx.Client, url: str) -> tuple[str, tuple[int, ...]]:
    sampling = {"max_new_tokens": MAX_NEW_TOKENS, "temperature": 0, "ignore_eos": True}
    body = {"text": PROMPT, "sampling_params": sampling}
    response = client.post(f"{url}/generate", json=body)
    response.raise_for_status()
    data = response.json()
    return data["meta_info"]["weight_version"], tuple(data["output_ids"])


def _probe_chat_stream(client: httpx.Client, url: str) -> tuple[str, tuple[int, ...]]:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": MAX_NEW_TOKENS,
        "stream": True,
        "logprobs": True,
        "ignore_eos": True,
    }
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        header = response.headers["x-weight-version"]
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert {chunk["weight_version"] for chunk in chunks} == {header}
    return header, tuple(chunks[-1]["meta_info"]["output_ids"])


PROBES: dict[str, Callable[[httpx.Client, str], tuple[str, tuple[int, ...]]]] = {
    "generate": _probe_generate,
    "chat-stream": _probe_chat_stream,
}


class Load:
    """``CLIENTS`` threads sending requests back to back until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.observed: list[Observed] = []
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(KINDS[i % len(KINDS)],), daemon=True)
            for i in range(CLIENTS)
        ]

    def _run(self, kind: str) -> None:
        with httpx.Client(timeout=60.0) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    version, output = PROBES[kind](client, self.url)
                except (httpx.HTTPError, AssertionError, KeyError, ValueError) as exc:
                    with self._lock:
                        self.failures.append(f"{kind}: {exc!r}")
                    continue
                with self._lock:
                    self.observed.append(Observed(kind, version, output, started, time.monotonic()))

    def wait_for(self, version: str, timeout: float = 60.0) -> None:
        """Until a response served by ``version`` has come back (the load keeps running)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if any(seen.version == version for seen in self.observed):
                    return
            time.sleep(0.01)
        raise AssertionError(f"no response served by {version} within {timeout}s")

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def _appliers(mode: str, url: str, sets: WeightSets) -> dict[str, Callable[[str], None]]:
    """Weight-set name → function that makes the engine serve it under a version."""

    def disk(path: Path) -> Callable[[str], None]:
        def apply(version: str) -> None:
            body = {"model_path": str(path), "weight_version": version}
            response = httpx.post(f"{url}/update_weights_from_disk", json=body, timeout=60)
            assert response.json()["success"] is True, response.text

        return apply

    if mode == "disk":
        return {"A": disk(sets.seed_a), "B": disk(sets.seed_b)}
    if mode == "lora":
        return {"A": disk(sets.seed_a), "B": disk(sets.adapter)}
    from reef.engine.broadcast import publish_weights
    from reef.modelkit import tiny

    models = {"A": tiny.build_model(), "B": tiny.build_model(seed=1)}

    def broadcast(name: str) -> Callable[[str], None]:
        def apply(version: str) -> None:
            publish_weights(models[name], [url], version, timeout_s=60)

        return apply

    return {name: broadcast(name) for name in models}


def _calibrate(
    url: str, appliers: dict[str, Callable[[str], None]]
) -> dict[str, dict[str, tuple[int, ...]]]:
    """Weight-set name → request kind → greedy output, measured with nothing else running."""
    fingerprints: dict[str, dict[str, tuple[int, ...]]] = {}
    with httpx.Client(timeout=60.0) as client:
        for name, apply in appliers.items():
            apply(f"calibrate-{name}")
            fingerprints[name] = {kind: PROBES[kind](client, url)[1] for kind in KINDS}
    for kind in KINDS:
        assert fingerprints["A"][kind] != fingerprints["B"][kind], "weight sets must differ"
    return fingerprints


@pytest.mark.parametrize("mode", ["disk", "lora", "broadcast"])
def test_hot_reload_under_load(mode: str, weight_sets: WeightSets, tmp_path: Path) -> None:
    with running_engine(tmp_path / "logs", "--max-concurrency", "4") as engine:
        appliers = _appliers(mode, engine.url, weight_sets)
        fingerprints = _calibrate(engine.url, appliers)
        appliers["A"]("r0")
        plan = [(f"r{i}", "B" if i % 2 else "A") for i in range(1, RELOADS + 1)]
        windows: list[tuple[float, float]] = []
        with Load(engine.url) as load:
            load.wait_for("r0")
            for version, name in plan:
                started = time.monotonic()
                appliers[name](version)
                windows.append((started, time.monotonic()))
                load.wait_for(version)
        weights_of = {"r0": "A", **dict(plan)}
        order = {version: index for index, version in enumerate(weights_of)}

        assert load.failures == []
        for seen in load.observed:
            assert seen.version in weights_of, seen
            assert seen.output == fingerprints[weights_of[seen.version]][seen.kind], seen
        assert {seen.version for seen in load.observed} == set(weights_of)
        for index, (started, ended) in enumerate(windows, start=1):
            overlapping = [s for s in load.observed if s.started < ended and s.ended > started]
            assert len(overlapping) >= CLIENTS, f"reload r{index}: {len(overlapping)} overlapped it"
            for instant in (started, (started + ended) / 2, ended):
                in_flight = sum(1 for s in load.observed if s.started <= instant <= s.ended)
                assert in_flight >= CLIENTS - 1, f"reload r{index}: {in_flight} in flight"
            for seen in load.observed:
                if seen.started > ended:
                    assert order[seen.version] >= index, seen
                if seen.ended < started:
                    assert order[seen.version] < index, seen
