"""SIGKILL ``reef trainer`` mid-step, three times: no sample is trained into two releases,
no committed release is lost, and training resumes until every sample is consumed.

``reef serve`` (embedded log, scripted upstream, its own trainer off) records exchanges
and reports; the trainer runs beside it as a separate process on the same embedded log
file, with a torch-free recipe whose "training" takes a while
(tests/support/fake_recipe.py: every candidate scores its parent + 0.1, so the head's
score counts the releases it descends from). The kills land in three places: while a
candidate trains, right after its proposal was appended (before the chain decided it),
and right after a release committed (before or after the offsets are).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reef.events import Event, ReleaseCommitted, ReleaseRejected, SampleJoined
from reef.eventstore import EventStore
from reef.topics import RELEASES, SAMPLES
from tests.e2e.conftest import open_log, unique_scenario
from tests.support.servers import (
    ManagedProcess,
    ReefProcess,
    UpstreamProcess,
    clean_env,
    reef_executable,
    spawn,
    start_reef,
)

pytestmark = pytest.mark.slow

RECIPE = "tests.support.fake_recipe:FakeRecipe"
SAMPLES_TOTAL = 40
BATCH = 4
TOKEN = "reef-crash-token"


@pytest.fixture
def deployment(
    tmp_path: Path, upstream: UpstreamProcess
) -> Iterator[tuple[ReefProcess, dict[str, str]]]:
    config = tmp_path / "recipe.yaml"
    config.write_text(
        f"recipe:\n  batching: {{batch_size: {BATCH}}}\n"
        "  eligibility: {max_staleness: 1000}\n  train_seconds: 1.0\n"
    )
    env = {
        "REEF_TOKEN": TOKEN,
        "REEF_RECIPE": RECIPE,
        "REEF_RECIPE_CONFIG": str(config),
        "REEF_TRAINER_IN_PROCESS": "false",
    }
    reef = start_reef(
        ["--upstream-url", upstream.v1_url], env=env, state_dir=tmp_path / "state", name="crash"
    )
    try:
        yield reef, env
    finally:
        reef.stop()


def record_workload(reef: ReefProcess, scenario: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "x-reef-scenario": scenario}
    with httpx.Client(base_url=reef.base_url, headers=headers, timeout=30.0) as client:
        for index in range(SAMPLES_TOTAL):
            word = f"w{index}"
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": f"Return exactly: {word}"}],
            }
            answer = client.post("/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            report = {
                "score": 1.0,
                "feedback": {"correction": word},
                "references": [answer.headers["x-reef-agent-record-id"]],
            }
            assert client.post("/reef/report", json=report).status_code in (200, 201, 202)


def events(state_dir: Path, topic: str, scenario: str) -> list[Event]:
    async def read() -> list[Event]:
        log = open_log("embedded", state_dir, None)
        try:
            return [
                s.event
                async for s in EventStore(log).read(topic, scenario=scenario)
                if s.event is not None
            ]
        finally:
            await log.close()

    return asyncio.run(read())


def start_trainer(state_dir: Path, env: dict[str, str], log_dir: Path, n: int) -> ManagedProcess:
    argv = [reef_executable(), "trainer", "--state-dir", str(state_dir)]
    return spawn(argv, env=clean_env(env), log_dir=log_dir, name=f"trainer-{n}")


def wait_for_line(process: ManagedProcess, text: str, after: int, timeout: float = 60.0) -> None:
    """Poll (every 10 ms) until ``text`` occurs more than ``after`` times in stderr."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.running(), process.output()
        if process.stderr_text().count(text) > after:
            return
        time.sleep(0.01)
    raise AssertionError(f"no {text!r} within {timeout}s\n{process.output()}")


def test_sigkill_mid_step_loses_nothing_and_trains_nothing_twice(
    deployment: tuple[ReefProcess, dict[str, str]], tmp_path: Path
) -> None:
    reef, env = deployment
    scenario = unique_scenario("crash")
    record_workload(reef, scenario)
    deadline = time.monotonic() + 60
    while len(events(reef.state_dir, SAMPLES, scenario)) < SAMPLES_TOTAL:
        assert time.monotonic() < deadline, "the join did not produce every sample"
        time.sleep(0.2)
    sample_ids = {e.event_id for e in events(reef.state_dir, SAMPLES, scenario)}

    kill_points = [
        ("training ", 0.4),  # inside produce (1 s of "training")
        ("proposed ", 0.0),  # the proposal is in the log, the chain has not decided yet
        ("committed for", 0.0),  # the release committed; offsets maybe not yet
    ]
    for n, (line, delay) in enumerate(kill_points):
        trainer = start_trainer(reef.state_dir, env, tmp_path / "logs", n)
        wait_for_line(trainer, line, 0)
        time.sleep(delay)
        trainer.process.kill()  # SIGKILL
        trainer.process.wait()

    final = start_trainer(reef.state_dir, env, tmp_path / "logs", len(kill_points))
    try:
        deadline = time.monotonic() + 120
        while True:
            committed = [
                e
                for e in events(reef.state_dir, RELEASES, scenario)
                if isinstance(e, ReleaseCommitted) and e.operation == "training"
            ]
            consumed = [s for e in committed for s in e.sample_ids]
            if set(consumed) == sample_ids or time.monotonic() > deadline:
                break
            assert final.running(), final.output()
            time.sleep(0.5)
    finally:
        final.stop()

    # no sample in two releases, and every sample trained exactly once
    assert len(consumed) == len(set(consumed)), "a sample was trained into two releases"
    assert set(consumed) == sample_ids
    # no committed release lost: one line of releases, each built on the previous head
    releases = events(reef.state_dir, RELEASES, scenario)
    heads = [e for e in releases if isinstance(e, ReleaseCommitted)]
    for parent, child in itertools.pairwise(heads):
        assert child.parent_release_id == parent.release_id
    assert len(committed) == SAMPLES_TOTAL // BATCH
    scores = [json.loads(e.evaluation_json)["candidate"]["score"] for e in committed]
    assert scores == pytest.approx([0.1 * (i + 1) for i in range(len(committed))])
    rejected = [e.reason for e in releases if isinstance(e, ReleaseRejected)]
    logs = "".join(p.read_text() for p in sorted((tmp_path / "logs").glob("trainer-*.stderr.log")))
    print(
        f"releases {len(committed)}, chain rejections {rejected}, restarts that waited for "
        f"an earlier proposal: {logs.count('waiting for the chain' + chr(39) + 's decision')}",
        flush=True,
    )
    assert all(isinstance(e, SampleJoined) for e in events(reef.state_dir, SAMPLES, scenario))
