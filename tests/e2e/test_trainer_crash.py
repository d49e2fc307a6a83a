"""SIGKILL ``reef trainer`` mid-step, three times: no sample is trained into two releases,
no committed release is lost, and training resumes until every sample is consumed.

Both logs (``log_kind``, tests/support/learning.py):

* ``embedded``: ``reef serve`` (scripted upstream, its own trainer off) records exchanges
  and reports; the trainer runs beside it as a separate process on the same embedded log
  file;
* ``kafka``: ``reef serve --log kafka`` on a topic prefix of its own, a ``reef streams``
  worker (the join and the release chain) and ``reef trainer --log kafka`` processes
  sharing serve's state dir (the local artifact store); the topics are deleted at the end.

The recipe is torch-free and its "training" takes a while (tests/support/fake_recipe.py:
every candidate scores its parent + 0.1, so the head's score counts the releases it
descends from). The kills land in three places: while a candidate trains, right after
its proposal was appended (before the chain decided it), and right after a release
committed (before or after the offsets are).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reef.core.events import Event, ReleaseCommitted, ReleaseRejected, SampleJoined
from reef.core.topics import RELEASES, SAMPLES
from reef.services.eventstore import EventStore
from reef.testing.servers import ManagedProcess, UpstreamProcess
from tests.support.api import unique_scenario
from tests.support.learning import (
    RECIPE,
    LearningDeployment,
    kafka_flags,
    learning_deployment,
    record_corrections,
    start_trainer,
    wait_for_line,
)

pytestmark = pytest.mark.slow

SAMPLES_TOTAL = 40
BATCH = 4
TOKEN = "reef-crash-token"
#: the most the last trainer may take to train what is left, generous for a loaded machine
FINAL_BUDGET_S = 240.0


@pytest.fixture
def deployment(
    request: pytest.FixtureRequest, log_kind: str, tmp_path: Path, upstream: UpstreamProcess
) -> Iterator[tuple[LearningDeployment, dict[str, str]]]:
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
    bootstrap = request.getfixturevalue("kafka_bootstrap") if log_kind == "kafka" else None
    with learning_deployment(
        log_kind,
        tmp_path,
        env,
        token=TOKEN,
        group=f"trainer:{RECIPE}",
        kafka_bootstrap=bootstrap,
        reef_args=("--upstream-url", upstream.v1_url),
        with_trainer=False,
    ) as found:
        yield found, env


def events(deployment: LearningDeployment, topic: str, scenario: str) -> list[Event]:
    async def read() -> list[Event]:
        log = deployment.open_log()
        try:
            return [
                s.event
                async for s in EventStore(log).read(topic, scenario=scenario)
                if s.event is not None
            ]
        finally:
            await log.close()

    return asyncio.run(read())


def assert_offsets_only_past_consumed(deployment: LearningDeployment, scenario: str) -> int:
    """The trainer group's committed offsets of ``reef.samples`` cover only samples a
    committed release consumed (offsets go forward only after the chain's decision);
    returns how many samples they cover."""

    async def read() -> tuple[list[tuple[int, int, str]], dict[int, int], set[str]]:
        log = deployment.open_log()
        try:
            store = EventStore(log)
            offsets = await log.committed(deployment.group, SAMPLES)
            samples = [
                (s.record.partition, s.record.offset, s.event.event_id)
                async for s in store.read(SAMPLES, scenario=scenario)
                if s.event is not None
            ]
            consumed = {  # read after the offsets: at least what they could cover
                sample
                async for s in store.read(RELEASES, scenario=scenario)
                if isinstance(s.event, ReleaseCommitted)
                for sample in s.event.sample_ids
            }
            return samples, offsets, consumed
        finally:
            await log.close()

    samples, offsets, consumed = asyncio.run(read())
    covered = [sid for p, o, sid in samples if o < offsets.get(p, 0)]
    assert set(covered) <= consumed, (
        f"offsets {offsets} cover {len(set(covered) - consumed)} sample(s) no release consumed"
    )
    return len(covered)


def trainer_process(
    deployment: LearningDeployment, env: dict[str, str], log_dir: Path, n: int
) -> ManagedProcess:
    """``reef trainer`` on the deployment's log, sharing serve's state dir."""
    flags = (
        kafka_flags(deployment.kafka_bootstrap, deployment.topic_prefix)
        if deployment.kafka_bootstrap is not None
        else []
    )
    return start_trainer(flags, deployment.state_dir, env, log_dir, f"trainer-{n}")


def test_sigkill_mid_step_loses_nothing_and_trains_nothing_twice(
    deployment: tuple[LearningDeployment, dict[str, str]], tmp_path: Path
) -> None:
    deployed, env = deployment
    scenario = unique_scenario("crash")
    began = time.monotonic()
    record_corrections(deployed.base_url, TOKEN, scenario, SAMPLES_TOTAL, timeout=30.0)
    deadline = time.monotonic() + 90
    while len(events(deployed, SAMPLES, scenario)) < SAMPLES_TOTAL:
        assert time.monotonic() < deadline, "the join did not produce every sample"
        deployed.alive()
        time.sleep(0.2)
    sample_ids = {e.event_id for e in events(deployed, SAMPLES, scenario)}
    assert len(sample_ids) == SAMPLES_TOTAL

    kill_points = [
        ("training ", 0.4),  # inside produce (1 s of "training")
        ("proposed ", 0.0),  # the proposal is in the log, the chain has not decided yet
        ("committed for", 0.0),  # the release committed; offsets maybe not yet
    ]
    logs = tmp_path / "logs"
    covered: list[int] = []  # samples below the committed offsets after each kill
    for n, (line, delay) in enumerate(kill_points):
        trainer = trainer_process(deployed, env, logs, n)
        wait_for_line(trainer, line, 0)
        time.sleep(delay)
        trainer.process.kill()  # SIGKILL
        trainer.process.wait()
        covered.append(assert_offsets_only_past_consumed(deployed, scenario))

    final = trainer_process(deployed, env, logs, len(kill_points))
    try:
        deadline = time.monotonic() + FINAL_BUDGET_S
        while True:
            committed = [
                e
                for e in events(deployed, RELEASES, scenario)
                if isinstance(e, ReleaseCommitted) and e.operation == "training"
            ]
            consumed = [s for e in committed for s in e.sample_ids]
            # done: every sample in a release, and the group's offsets past all of them
            if set(consumed) == sample_ids and deployed.trainer_caught_up(SAMPLES_TOTAL):
                break
            assert time.monotonic() < deadline, (
                f"{len(set(consumed))}/{SAMPLES_TOTAL} samples trained in "
                f"{FINAL_BUDGET_S:.0f} s\n{final.output()}"
            )
            assert final.running(), final.output()
            deployed.alive()
            time.sleep(0.5)
    finally:
        final.stop()

    # no sample in two releases, and every sample trained exactly once
    assert len(consumed) == len(set(consumed)), "a sample was trained into two releases"
    assert set(consumed) == sample_ids
    # no committed release lost: one line of releases, each built on the previous head
    releases = events(deployed, RELEASES, scenario)
    heads = [e for e in releases if isinstance(e, ReleaseCommitted)]
    assert heads[0].operation == "creation"
    for parent, child in itertools.pairwise(heads):
        assert child.parent_release_id == parent.release_id
    assert len(committed) == SAMPLES_TOTAL // BATCH
    scores = [json.loads(e.evaluation_json)["candidate"]["score"] for e in committed]
    assert scores == pytest.approx([0.1 * (i + 1) for i in range(len(committed))])
    rejected = [e.reason for e in releases if isinstance(e, ReleaseRejected)]
    text = "".join(p.read_text() for p in sorted(logs.glob("trainer-*.stderr.log")))
    print(
        f"{deployed.kind}: releases {len(committed)}, chain rejections {rejected}, restarts "
        f"that waited for an earlier proposal: "
        f"{text.count('waiting for the chain' + chr(39) + 's decision')}, samples below the "
        f"committed offsets after each kill {covered}, "
        f"{time.monotonic() - began:.0f} s",
        flush=True,
    )
    assert all(isinstance(e, SampleJoined) for e in events(deployed, SAMPLES, scenario))
