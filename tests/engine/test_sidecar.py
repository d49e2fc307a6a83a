"""The engine sidecar: every committed release reaches the engine, and receipts tell the truth.

Three real-process scenarios, all on the embedded log (a trainer's proposals are
appended by this test process to the server's SQLite log, as a trainer beside
``reef serve`` would; the chain inside ``reef serve`` commits them):

* version-true receipts: ``reef serve`` with no upstream (the local tiny engine) and
  ``REEF_ENGINE_SCENARIO`` (the in-process sidecar). Two training releases with
  distinguishable weights; after each the engine reports the new head, greedy chat
  requests through Reef carry ``x-reef-release-id`` = that head and the output those
  weights produce, and the second load happens under 8 requests in flight (none may
  fail). Every recorded InferenceRecorded names the release whose weights produced it.
  A deterministic variant holds one request in the engine's queue across a load.
* resilience: a separate ``reef engine`` and ``reef sidecar``. The engine is killed
  (SIGKILL) and restarted on its port on its base weights: the sidecar loads the head
  again. The artifact store's objects vanish while a release is committed: loads fail
  (EngineLoadFailed) and the engine keeps serving; once they are back the sidecar
  catches up.
* a corrupted artifact is never loaded: EngineLoadFailed names the corruption, the
  engine keeps serving (and receipts keep naming) the previous release; a later good
  release is loaded.

The expected output of every weight set is computed in this process with the engine's
own decoder (greedy, ``ignore_eos``), independent of any hot reload.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch  # noqa: F401  (installed by the bootstrap: a missing torch fails here)

from reef.artifacts import LocalArtifactStore
from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.events import (
    EngineLoadFailed,
    InferenceRecorded,
)
from reef.testing.servers import (
    ManagedProcess,
    ReefProcess,
    clean_env,
    dead_url,
    free_port,
    reef_executable,
    spawn,
    start_reef,
)
from tests.support.engine import PROMPT
from tests.support.sidecar import (
    MAX_TOKENS,
    TOKEN,
    Engine,
    Fingerprint,
    chat_body,
    committed,
    create_scenario,
    engine_events,
    events,
    failed,
    head_of,
    loaded,
    propose,
    publish,
    reef_client,
    release,
    scenario_status,
    start_engine_on,
    wait_engine_on,
    wait_until,
)

pytestmark = pytest.mark.slow

CLIENTS = 8
#: a long generation (the tiny model's context is 1024 tokens)
QUEUE_TOKENS = 900
#: generations the local engine runs at once (``reef engine --max-concurrency`` default)
ENGINE_SLOTS = 4
#: weight-set name → seed of the tiny model (BASE is what ``--model tiny`` builds)
SEEDS = {"BASE": 1234, "A": 1, "B": 2, "C": 3}


# ---------------------------------------------------------------------------
# Weight sets and what they produce


@pytest.fixture(scope="module")
def fingerprints() -> dict[str, Fingerprint]:
    """Weight-set name → its output, computed here with the engine's decoder."""
    from reef.engine.generation import Decoder, Sampling
    from reef.engine.loader import context_window, eos_ids
    from reef.modelkit import tiny

    tokenizer = tiny.build_tokenizer()
    encoded = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=True
    )
    if isinstance(encoded, Mapping):
        encoded = encoded["input_ids"]
    assert isinstance(encoded, list), encoded
    # transformers types the tokens as int | str | list[int]; tokenize=True gives ints
    prompt_ids = [int(token) for token in encoded]  # type: ignore[arg-type]

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=True))

    found = {}
    for name, seed in SEEDS.items():
        model = tiny.build_model(seed=seed)
        decoder = Decoder(model, eos_ids=eos_ids(model, tokenizer), context=context_window(model))
        sampling = Sampling(max_new_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
        completion = decoder.generate(prompt_ids, sampling, decode=decode)
        found[name] = Fingerprint(tuple(completion.output_ids), decode(completion.output_ids))
    texts = {fp.text for fp in found.values()}
    assert len(texts) == len(SEEDS), f"weight sets must answer differently: {found}"
    return found


@pytest.fixture(scope="module")
def weight_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Weight-set name → a Hugging Face folder of it (what a trainer would publish)."""
    from reef.modelkit import tiny

    root = tmp_path_factory.mktemp("sidecar-weights")
    return {
        name: tiny.save_tiny(root / name.lower(), seed=seed)
        for name, seed in SEEDS.items()
        if name != "BASE"
    }


@dataclass(frozen=True)
class Answer:
    """One chat request through Reef: what the client got."""

    kind: str
    release: str  # x-reef-release-id
    weight_version: str  # what the engine said in the body
    ids: tuple[int, ...]
    text: str
    receipt: str | None
    started: float
    ended: float


def ask(
    client: httpx.Client, scenario: str, kind: str = "buffered", max_tokens: int = MAX_TOKENS
) -> Answer:
    """One greedy chat completion through Reef (``buffered`` or ``stream``)."""
    headers = {"x-reef-scenario": scenario}
    started = time.monotonic()
    if kind == "buffered":
        body = chat_body(False, max_tokens)
        response = client.post("/v1/chat/completions", json=body, headers=headers)
        assert response.status_code == 200, response.text
        body = response.json()
        return Answer(
            kind,
            response.headers["x-reef-release-id"],
            body["weight_version"],
            tuple(body["meta_info"]["output_ids"]),
            body["choices"][0]["message"]["content"],
            response.headers.get("x-reef-agent-record-id"),
            started,
            time.monotonic(),
        )
    chunks: list[dict[str, Any]] = []
    with client.stream(
        "POST", "/v1/chat/completions", json=chat_body(True, max_tokens), headers=headers
    ) as response:
        assert response.status_code == 200, response.read().decode()
        release_id = response.headers["x-reef-release-id"]
        done = False
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line.removeprefix("data: ")
            if data.strip() == "[DONE]":
                done = True
                continue
            chunks.append(json.loads(data))
    assert done, chunks
    versions = {c["weight_version"] for c in chunks if "weight_version" in c}
    assert len(versions) == 1, versions
    (meta,) = [c["meta_info"] for c in chunks if "meta_info" in c]
    text = "".join(
        choice.get("delta", {}).get("content") or ""
        for c in chunks
        for choice in c.get("choices", [])
    )
    receipts = [c["reef"]["agent_record_id"] for c in chunks if "reef" in c]
    return Answer(
        kind,
        release_id,
        versions.pop(),
        tuple(meta["output_ids"]),
        text,
        receipts[0] if receipts else None,
        started,
        time.monotonic(),
    )


class Load:
    """``CLIENTS`` threads sending chat requests through Reef back to back until stopped."""

    def __init__(self, reef: ReefProcess, scenario: str) -> None:
        self.reef = reef
        self.scenario = scenario
        self.stop = threading.Event()
        self.answers: list[Answer] = []
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=("buffered" if i % 2 else "stream",))
            for i in range(CLIENTS)
        ]

    def _run(self, kind: str) -> None:
        with reef_client(self.reef) as client:
            while not self.stop.is_set():
                try:
                    answer = ask(client, self.scenario, kind)
                except (httpx.HTTPError, AssertionError, KeyError, ValueError) as exc:
                    with self._lock:
                        self.failures.append(f"{kind}: {exc!r}")
                    continue
                with self._lock:
                    self.answers.append(answer)

    def seen(self, release_id: str) -> bool:
        with self._lock:
            return any(a.release == release_id for a in self.answers)

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=120)


# ---------------------------------------------------------------------------
# Processes


def serve_local_engine(tmp_path: Path, scenario: str) -> ReefProcess:
    """``reef serve`` with no upstream (local tiny engine) and the in-process sidecar."""
    env = {"REEF_TOKEN": TOKEN, "REEF_ENGINE_SCENARIO": scenario}
    return start_reef(
        [], env=env, state_dir=tmp_path / "state", timeout=240.0, name="reef-local-engine"
    )


@contextlib.contextmanager
def stopping(*processes: Callable[[], object]) -> Iterator[None]:
    try:
        yield
    finally:
        for stop in processes:
            with contextlib.suppress(Exception):
                stop()


# ---------------------------------------------------------------------------
# 1. Version-true receipts, end to end


def test_receipts_name_the_weights_that_answered(
    tmp_path: Path, fingerprints: dict[str, Fingerprint], weight_folders: dict[str, Path]
) -> None:
    scenario = f"sidecar-{uuid.uuid4().hex[:10]}"
    reef = serve_local_engine(tmp_path, scenario)
    state = reef.state_dir
    with stopping(reef.stop):
        base = create_scenario(reef, scenario)
        wait_engine_on(reef, scenario, "local", base)
        with reef_client(reef) as client:
            for kind in ("buffered", "stream"):
                answer = ask(client, scenario, kind)
                assert (answer.release, answer.weight_version) == (base, base), answer
                assert (answer.ids, answer.text) == (
                    fingerprints["BASE"].ids,
                    fingerprints["BASE"].text,
                ), answer

        # release 1: no traffic while it loads
        r1 = release(state, scenario, base, weight_folders["A"])
        wait_engine_on(reef, scenario, "local", r1)
        assert head_of(reef, scenario) == r1
        with reef_client(reef) as client:
            for kind in ("buffered", "stream", "buffered"):
                answer = ask(client, scenario, kind)
                assert (answer.release, answer.weight_version) == (r1, r1), answer
                assert answer.ids == fingerprints["A"].ids, answer
                assert answer.text == fingerprints["A"].text, answer
        (event,) = loaded(state, scenario, r1)
        assert (event.engine_id, event.weight_version, event.method) == ("local", r1, "disk")

        # release 2: loaded while 8 requests are in flight through Reef
        with Load(reef, scenario) as load:
            wait_until("a response of r1 under load", lambda: load.seen(r1))
            load_started = time.monotonic()
            r2 = release(state, scenario, r1, weight_folders["B"])
            wait_engine_on(reef, scenario, "local", r2)
            load_ended = time.monotonic()
            wait_until("a response of r2 under load", lambda: load.seen(r2))
        weights_of = {base: "BASE", r1: "A", r2: "B"}
        names = {base: "base", r1: "r1", r2: "r2"}
        with reef_client(reef) as client:
            answer = ask(client, scenario)
        assert (answer.release, answer.ids) == (r2, fingerprints["B"].ids), answer
        sent = 2 + 3 + len(load.answers) + 1
        records = events(state, topics.INFERENCE, scenario)
        assert all(isinstance(r, InferenceRecorded) for r in records)
        assert len(records) == sent, (len(records), sent)
        recorded: dict[str, InferenceRecorded] = {r.event_id: r for r in records}  # type: ignore[misc]

        assert load.failures == [], load.failures[:5]
        # the engine is honest: each output is what the weights it names produce
        for answer in load.answers:
            expected = fingerprints[weights_of[answer.weight_version]]
            assert (answer.ids, answer.text) == (expected.ids, expected.text), answer
        # and so is Reef: the receipt names the release the engine served
        mislabelled = [
            f"{a.kind}: x-reef-release-id={names.get(a.release, a.release)} but served by "
            f"{names.get(a.weight_version, a.weight_version)}; record: "
            + (
                f"release_id={names.get(r.release_id)} served_release_id="
                f"{names.get(r.served_release_id or '', r.served_release_id)} "
                f"weight_version={names.get(r.weight_version or '', r.weight_version)}"
                if a.receipt is not None and (r := recorded.get(a.receipt)) is not None
                else "none"
            )
            for a in load.answers
            if a.release != a.weight_version
        ]
        assert mislabelled == [], f"{len(mislabelled)}/{len(load.answers)}: {mislabelled[:5]}"
        assert {a.release for a in load.answers} == {r1, r2}
        overlapping = [a for a in load.answers if a.started < load_ended and a.ended > load_started]
        assert len(overlapping) >= CLIENTS, f"only {len(overlapping)} requests overlapped the load"
        # requests started after the engine reported r2 are served by r2
        for answer in load.answers:
            if answer.started > load_ended:
                assert answer.release == r2, answer

        # every record names the release whose weights produced its output
        by_release: dict[str, int] = {}
        for record in recorded.values():
            assert record.status == 200 and record.complete, record
            assert record.served_release_id is not None, record
            assert record.weight_version == record.served_release_id, record
            assert record.served_release_id in weights_of, record
            assert record.response_json is not None
            response = json.loads(record.response_json)
            expected = fingerprints[weights_of[record.served_release_id]]
            if record.stream:
                assert response["message"]["content"] == expected.text, record
            else:
                assert response["choices"][0]["message"]["content"] == expected.text, record
                assert tuple(response["meta_info"]["output_ids"]) == expected.ids, record
            by_release[record.served_release_id] = by_release.get(record.served_release_id, 0) + 1
        assert set(by_release) == {base, r1, r2}, by_release
        for answer in load.answers:
            assert answer.receipt is not None, answer
            assert recorded[answer.receipt].served_release_id == answer.release, answer
        assert [e for e in engine_events(state, scenario) if isinstance(e, EngineLoadFailed)] == []


def test_a_request_queued_in_the_engine_across_a_load_names_the_new_release(
    tmp_path: Path, fingerprints: dict[str, Fingerprint], weight_folders: dict[str, Path]
) -> None:
    """Deterministic version of the race above: a request enters Reef while r1 is the
    head, waits in the engine's queue (its slots busy with long generations) while r2 is
    committed and loaded, and is answered by r2: its receipt must say r2."""
    scenario = f"sidecar-{uuid.uuid4().hex[:10]}"
    reef = serve_local_engine(tmp_path, scenario)
    state = reef.state_dir
    with stopping(reef.stop):
        base = create_scenario(reef, scenario)
        wait_engine_on(reef, scenario, "local", base)
        r1 = release(state, scenario, base, weight_folders["A"])
        wait_engine_on(reef, scenario, "local", r1)
        content_b = publish(state, weight_folders["B"])

        def one(max_tokens: int) -> Answer:
            with reef_client(reef, timeout=300.0) as client:
                return ask(client, scenario, "buffered", max_tokens)

        # long generations fill the engine's slots (each meant to outlast the load that follows)
        with ThreadPoolExecutor(ENGINE_SLOTS + 1) as pool:
            long = [pool.submit(one, QUEUE_TOKENS) for _ in range(ENGINE_SLOTS)]
            time.sleep(0.5)
            queued = pool.submit(one, MAX_TOKENS)
            time.sleep(0.3)
            assert not queued.done(), "the request was not held in the engine's queue"
            r2 = committed(state, scenario, propose(state, scenario, r1, content_b))
            wait_engine_on(reef, scenario, "local", r2)
            answer = queued.result()
            answers = [answer, *(f.result() for f in long)]
        names = {r1: "r1", r2: "r2"}
        weights_of = {r1: "A", r2: "B"}
        assert answer.weight_version == r2, "precondition: the load finished before it ran"
        for each in answers:
            expected = fingerprints[weights_of[each.weight_version]]
            assert each.ids[:MAX_TOKENS] == expected.ids, each
        records = {
            e.event_id: e
            for e in events(state, topics.INFERENCE, scenario)
            if isinstance(e, InferenceRecorded)
        }
        mislabelled = [
            f"x-reef-release-id={names[a.release]} but served by {names[a.weight_version]}; "
            f"recorded served_release_id={records[a.receipt or ''].served_release_id}"
            for a in answers
            if a.release != a.weight_version
            or records[a.receipt or ""].served_release_id != a.weight_version
        ]
        assert mislabelled == [], mislabelled


# ---------------------------------------------------------------------------
# 2. A separate sidecar survives its engine restarting and the store going away


def test_sidecar_survives_engine_restart_and_unreadable_store(
    tmp_path: Path, fingerprints: dict[str, Fingerprint], weight_folders: dict[str, Path]
) -> None:
    scenario = f"sidecar-{uuid.uuid4().hex[:10]}"
    logs = tmp_path / "logs"
    # reef serve only runs the chain and the API here: its upstream is nowhere
    reef = start_reef(
        ["--upstream-url", dead_url()],
        env={"REEF_TOKEN": TOKEN},
        state_dir=tmp_path / "state",
        name="reef-chain",
    )
    state = reef.state_dir
    port = free_port()
    engine_id = f"engine-{port}"
    engines: list[Engine] = []
    sidecar: ManagedProcess | None = None

    def stop_all() -> None:
        if sidecar is not None:
            sidecar.stop()
        for engine in engines:
            engine.managed.stop()
        reef.stop()

    with stopping(stop_all):
        engines.append(start_engine_on(port, logs, "engine-1"))
        base = create_scenario(reef, scenario)
        argv = [
            reef_executable(),
            "sidecar",
            "--engine",
            engines[-1].url,
            "--scenario",
            scenario,
            "--engine-id",
            engine_id,
            "--state-dir",
            str(state),
        ]
        sidecar = spawn(argv, env=clean_env(), log_dir=logs, name="sidecar")

        def diagnostics() -> str:
            assert sidecar is not None
            return f"{sidecar.output()}\n{engines[-1].managed.output()}"

        def sidecar_alive() -> None:
            assert sidecar is not None
            assert sidecar.running(), diagnostics()

        wait_engine_on(reef, scenario, engine_id, base)
        assert engines[-1].info()["weight_version"] == base
        assert engines[-1].chat() == fingerprints["BASE"]

        r1 = release(state, scenario, base, weight_folders["A"])
        wait_engine_on(reef, scenario, engine_id, r1)
        assert engines[-1].info()["weight_version"] == r1
        assert engines[-1].chat() == fingerprints["A"]
        loads_before = len(loaded(state, scenario, r1))

        # the engine dies (SIGKILL) and comes back on the same port on its base weights
        engines[-1].managed.process.kill()
        engines[-1].managed.process.wait(10)
        wait_until(
            "the sidecar to notice the engine is gone",
            lambda: failed(state, scenario, r1),
            timeout=30,
        )
        unreachable = failed(state, scenario, r1)[0]
        assert unreachable.engine_id == engine_id
        assert "EngineUnavailableError" in unreachable.error, unreachable
        engines.append(start_engine_on(port, logs, "engine-2"))
        wait_until(
            "EngineLoaded of r1 on the restarted engine",
            lambda: len(loaded(state, scenario, r1)) > loads_before,
            timeout=90,
        )
        assert engines[-1].info()["weight_version"] == r1, diagnostics()
        assert engines[-1].chat() == fingerprints["A"]
        wait_engine_on(reef, scenario, engine_id, r1)
        sidecar_alive()

        # the artifact store's objects vanish while r2 is committed, then come back
        content_b = publish(state, weight_folders["B"])
        objects = state / "artifacts" / "lfs" / "objects"
        hidden = objects.with_name("objects-hidden")
        os.rename(objects, hidden)
        try:
            r2 = committed(state, scenario, propose(state, scenario, r1, content_b))
            wait_until(
                "EngineLoadFailed for r2 while the store is unreadable",
                lambda: len(failed(state, scenario, r2)) >= 2,
                timeout=30,
            )
            assert engines[-1].info()["weight_version"] == r1
            assert engines[-1].chat() == fingerprints["A"]
            assert loaded(state, scenario, r2) == []
        finally:
            os.rename(hidden, objects)
        for event in failed(state, scenario, r2):
            assert "ArtifactNotFoundError" in event.error, event
        attempts = [event.attempt for event in failed(state, scenario, r2)]
        assert max(attempts) >= 2, attempts
        wait_engine_on(reef, scenario, engine_id, r2, timeout=60)
        assert engines[-1].info()["weight_version"] == r2
        assert engines[-1].chat() == fingerprints["B"]
        sidecar_alive()
        assert "Traceback" not in sidecar.stderr_text(), diagnostics()


# ---------------------------------------------------------------------------
# 3. A corrupted artifact is never loaded


def flip_a_byte(state_dir: Path, content_id: str, file_name: str) -> None:
    """Corrupt one stored object of a release in place (same size, other bytes)."""
    store = LocalArtifactStore.in_state_dir(state_dir)
    manifest = ContentStore(store).load(content_id)
    path = store.object_path(manifest[file_name].oid)
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.chmod(path, 0o444)


def test_a_corrupted_release_is_never_loaded(
    tmp_path: Path, fingerprints: dict[str, Fingerprint], weight_folders: dict[str, Path]
) -> None:
    scenario = f"sidecar-{uuid.uuid4().hex[:10]}"
    reef = serve_local_engine(tmp_path, scenario)
    state = reef.state_dir
    with stopping(reef.stop):
        base = create_scenario(reef, scenario)
        wait_engine_on(reef, scenario, "local", base)
        r1 = release(state, scenario, base, weight_folders["A"])
        wait_engine_on(reef, scenario, "local", r1)

        bad_content = publish(state, weight_folders["B"])
        flip_a_byte(state, bad_content, "model.safetensors")
        bad = committed(state, scenario, propose(state, scenario, r1, bad_content))
        wait_until(
            "two failed loads of the corrupted release",
            lambda: len(failed(state, scenario, bad)) >= 2,
            timeout=30,
        )
        failures = failed(state, scenario, bad)
        # one load loop: attempts count up once (no second loop retrying beside it)
        assert [e.attempt for e in failures] == list(range(1, len(failures) + 1)), failures
        for event in failures:
            assert event.engine_id == "local"
            assert "ArtifactCorruptError" in event.error and "corrupt" in event.error, event
        assert head_of(reef, scenario) == bad
        engine = scenario_status(reef, scenario)["engines"]["local"]
        assert engine == {"release_id": r1, "weight_version": r1}
        with reef_client(reef) as client:
            answers = [ask(client, scenario, kind) for kind in ("buffered", "stream")]
        for answer in answers:
            assert (answer.release, answer.weight_version) == (r1, r1), answer
            assert (answer.ids, answer.text) == (fingerprints["A"].ids, fingerprints["A"].text)
        receipts = {a.receipt for a in answers}
        records = [
            r
            for r in events(state, topics.INFERENCE, scenario)
            if isinstance(r, InferenceRecorded) and r.event_id in receipts
        ]
        assert len(records) == len(answers)
        for record in records:
            # the head was the corrupted release; the engine truthfully served r1
            assert (record.release_id, record.served_release_id) == (bad, r1), record
        assert loaded(state, scenario, bad) == []
        assert not (state / "engine-cache" / bad_content).exists()

        # a good release on top of the corrupted one is loaded
        good = release(state, scenario, bad, weight_folders["C"])
        wait_engine_on(reef, scenario, "local", good, timeout=60)
        with reef_client(reef) as client:
            answer = ask(client, scenario)
        assert (answer.release, answer.ids) == (good, fingerprints["C"].ids), answer
        assert loaded(state, scenario, bad) == []
