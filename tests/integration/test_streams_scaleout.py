"""Scaling out on the single-node Kafka: stream workers join and leave under load, and two
trainers split the partitions of ``reef.samples``.

Each test runs on a fresh topic prefix (6 partitions), deleted at the end.

* stream workers (``reef streams``, streams/host.py: a consumer group with the range
  assignor, one task per partition number): under a steady load through ``reef serve
  --log kafka`` one worker runs, then a second and a third join (distinct
  ``--instance-id``), then one is stopped (SIGTERM) and one killed (SIGKILL). After each
  change, every partition of the loaded inputs received new records and the group's
  committed offsets reach the end offsets of every input partition (progress on all six),
  and the group's assignment (DescribeGroups, tests/support/consumer_groups.py) has one
  member per running worker holding ``6 / n`` partition numbers of every input topic,
  which is also what each worker last logged ("assigned partitions [...]"). At the end:
  every acknowledged report has exactly one fate and no sample is duplicated
  (tests/support/consistency.py).
* trainers: two ``reef trainer --log kafka --partition ...`` processes own partitions
  0-2 and 3-5 of ``reef.samples``; the scenarios are picked (reef.log.partitioner) so that
  two hash into each half. Each trainer trains only the scenarios of its partitions (its
  proposals carry its pid, its log names only them, it commits only its partitions'
  offsets) and every sample ends in exactly one committed release.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.core import topics
from reef.core.events import Event, ReleaseCommitted, ReleaseProposed, ReleaseRejected, SampleJoined
from reef.hosts import READY_LINE
from reef.log.kafka import KafkaLog, delete_prefixed_topics
from reef.log.partitioner import partition_for
from reef.services.eventstore import EventStore
from reef.testing.servers import (
    ManagedProcess,
    ReefProcess,
    UpstreamProcess,
    clean_env,
    reef_executable,
    run_reef,
    running_upstream,
    spawn,
    start_reef,
)
from reef_dev.load import SteadyLoad
from tests.support import consistency
from tests.support.consumer_groups import GroupState, describe_group
from tests.support.learning import (
    LearningDeployment,
    kafka_flags,
    learning_deployment,
    record_corrections,
    start_trainer,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 6
#: the stream processors' input topics (the join's and the chain's)
INPUTS = (topics.SCENARIOS, topics.INFERENCE, topics.REPORTS, topics.RELEASE_PROPOSALS)
#: the inputs the steady load writes to, on every partition (one scenario per partition)
LOADED = (topics.INFERENCE, topics.REPORTS)
#: a killed (or stopped: static members do not leave) worker's partitions move on quickly
STREAMS_ENV = {"REEF_STREAMS_SESSION_TIMEOUT_S": "6"}
TOKEN = "reef-scaleout-token"
RATE = 8.0
#: chat completions acknowledged after a change before the progress check's targets
ACKS_PER_STAGE = 24
#: generous waits: the machine is small and shared (never asserted as timings)
READY_TIMEOUT_S = 120.0
PROGRESS_TIMEOUT_S = 150.0
SPREAD_TIMEOUT_S = 120.0
ASSIGNED_LINE = re.compile(r"assigned partitions \[([0-9, ]*)\]")
#: the same line's account of the stores a rebalance kept and what it read (streams/host.py)
KEPT_LINE = re.compile(
    r"assigned partitions \[([0-9, ]*)\] \(stores kept: \[([0-9, ]*)\]\): restored (\d+)"
)
#: a worker stopped with SIGTERM is out of the group in this long (its session: 6 s)
DEPARTURE_S = 3.0

Offsets = dict[str, dict[int, int]]


def scenario_names(tag: str, wanted: Sequence[int], partitions: int = PARTITIONS) -> list[str]:
    """One scenario name per wanted partition, each hashing (Kafka's default partitioner,
    the scenario is the record key) into that partition; in the order of ``wanted``."""
    found: dict[int, str] = {}
    todo = set(wanted)
    for i in itertools.count():
        name = f"{tag}-{i}"
        p = partition_for(name.encode(), partitions)
        if p in todo and p not in found:
            found[p] = name
            if len(found) == len(todo):
                return [found[p] for p in wanted]
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    with running_upstream(tmp_path_factory.mktemp("upstream")) as process:
        yield process


@pytest.fixture
def prefix(kafka_bootstrap: str) -> Iterator[str]:
    """A fresh topic prefix with Reef's topics (6 partitions); every topic under it
    (the workers' changelogs included) deleted after the test."""
    name = f"t-scale-{uuid.uuid4().hex[:10]}-"
    created = run_reef("topics", "create", *kafka_flags(kafka_bootstrap, name), timeout=120)
    assert created.returncode == 0, f"reef topics create:\n{created.stdout}\n{created.stderr}"
    yield name
    try:
        asyncio.run(asyncio.wait_for(delete_prefixed_topics(kafka_bootstrap, name), 60))
    except Exception as exc:  # cleanup must not hide the test's own outcome
        print(f"could not delete topics {name}*: {exc!r}")


def new_log(bootstrap: str, prefix: str) -> Callable[[], KafkaLog]:
    return lambda: KafkaLog(
        bootstrap, topic_prefix=prefix, client_id="reef-scaleout-check", request_timeout_ms=15000
    )


# ---------------------------------------------------------------------------
# Stream workers


@dataclass
class Worker:
    """One ``reef streams`` process with its own instance id and state dir."""

    name: str
    bootstrap: str
    prefix: str
    work_dir: Path
    managed: ManagedProcess | None = None
    ready_s: float = 0.0

    def start(self) -> Worker:
        argv = [
            reef_executable(),
            "streams",
            *kafka_flags(self.bootstrap, self.prefix),
            "--instance-id",
            f"{self.prefix}{self.name}",
            "--state-dir",
            str(self.work_dir / "state"),
            "--loglevel",
            "info",
        ]
        self.managed = spawn(
            argv, env=clean_env(STREAMS_ENV), log_dir=self.work_dir, name=self.name
        )
        return self

    @property
    def process(self) -> ManagedProcess:
        assert self.managed is not None, f"{self.name} never started"
        return self.managed

    @property
    def client_id(self) -> str:
        """The client id of the worker's group consumer (streams/host.py)."""
        return f"{self.prefix}{topics.STREAMS_APP_ID}-{self.process.pid}"

    def text(self) -> str:
        return self.process.stdout_text() + self.process.stderr_text()

    def tail(self, limit: int = 3000) -> str:
        return f"--- {self.name} (exit {self.process.process.poll()}):\n{self.text()[-limit:]}"

    def running(self) -> bool:
        return self.managed is not None and self.managed.running()

    def assert_running(self) -> None:
        assert self.running(), f"reef streams {self.name} died\n{self.tail(6000)}"

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        began = time.monotonic()
        while READY_LINE not in self.text():
            self.assert_running()
            assert time.monotonic() - began < timeout, (
                f"{self.name} not ready in {timeout:.0f} s\n{self.tail(6000)}"
            )
            time.sleep(0.2)
        self.ready_s = time.monotonic() - began

    def last_assigned(self) -> list[int] | None:
        """The partition numbers of the worker's last "assigned partitions" line."""
        text = self.process.stderr_text()
        assert "was never awaited" not in text, f"{self.name}: {text[-4000:]}"
        found = ASSIGNED_LINE.findall(text)
        if not found:
            return None
        return sorted(int(n) for n in found[-1].replace(",", " ").split())

    def kept_stores(self) -> list[tuple[list[int], list[int], int]]:
        """Per assignment: (the numbers assigned, those whose stores were kept, changelog
        records read for all of them)."""

        def numbers(text: str) -> list[int]:
            return sorted(int(n) for n in text.replace(",", " ").split())

        return [
            (numbers(assigned), numbers(kept), int(read))
            for assigned, kept, read in KEPT_LINE.findall(self.process.stderr_text())
        ]

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (stop after the batch in flight); the exit status, None if it hung."""
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            return self.process.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """SIGKILL: no shutdown, an open transaction is left to the next owner to abort."""
        if self.running():
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.process.wait(30)

    def stop(self) -> None:
        if self.managed is not None:
            self.managed.stop(timeout=20)


def serve_kafka(
    bootstrap: str, prefix: str, upstream: UpstreamProcess, state_dir: Path
) -> ReefProcess:
    env = {"REEF_TOKEN": TOKEN, "REEF_UPSTREAM_API_KEY": f"sk-upstream-{uuid.uuid4().hex[:8]}"}
    args = [*kafka_flags(bootstrap, prefix), "--upstream-url", upstream.v1_url]
    return start_reef(args, env=env, state_dir=state_dir, timeout=120.0, name="reef")


def create_scenarios(base_url: str, names: Sequence[str]) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60.0) as client:
        for name in names:
            response = client.post("/reef/scenarios", json={"name": name})
            assert response.status_code == 201, response.text


async def _ends(log: KafkaLog, names: Sequence[str]) -> Offsets:
    return {topic: await log.end_offsets(topic) for topic in names}


async def _committed(log: KafkaLog, names: Sequence[str]) -> Offsets:
    # the log prefixes consumer groups like topics: this is <prefix>reef-streams
    return {topic: await log.committed(topics.STREAMS_APP_ID, topic) for topic in names}


def read_offsets(
    open_log: Callable[[], KafkaLog], names: Sequence[str], committed: bool = False
) -> Offsets:
    async def read() -> Offsets:
        log = open_log()
        await log.start()
        try:
            return await (_committed if committed else _ends)(log, names)
        finally:
            await log.close()

    return asyncio.run(read())


def wait_committed(
    open_log: Callable[[], KafkaLog],
    targets: Offsets,
    running: Sequence[Worker],
    timeout: float = PROGRESS_TIMEOUT_S,
) -> float:
    """Until the group's committed offset of every input partition reaches ``targets``
    (end offsets read earlier); fails if a running worker dies. Seconds it took."""
    began = time.monotonic()
    while True:
        done = read_offsets(open_log, list(targets), committed=True)
        behind = {
            topic: {p: end - done[topic].get(p, 0) for p, end in ends.items()}
            for topic, ends in targets.items()
        }
        behind = {t: {p: n for p, n in lags.items() if n > 0} for t, lags in behind.items()}
        behind = {t: lags for t, lags in behind.items() if lags}
        if not behind:
            return time.monotonic() - began
        for worker in running:
            worker.assert_running()
        assert time.monotonic() - began < timeout, (
            f"inputs not committed in {timeout:.0f} s (records behind by partition): {behind}\n"
            + "\n".join(w.tail() for w in running)
        )
        time.sleep(0.5)


def spread_problems(group: GroupState, running: Sequence[Worker], prefix: str) -> list[str]:
    """What keeps the group's assignment from being an even, co-partitioned spread of the
    six partition numbers over exactly the running workers (empty: it is one)."""
    problems = []
    if group.state != "Stable":
        problems.append(f"group state {group.state}")
    if group.protocol != "range":
        problems.append(f"assignor {group.protocol!r}")
    members = group.by_client_id()
    expected = {w.client_id for w in running}
    if set(members) != expected:
        problems.append(f"members {sorted(members)}, running workers {sorted(expected)}")
        return problems
    inputs = [prefix + t for t in INPUTS]
    share = PARTITIONS // len(running)
    seen: Counter[int] = Counter()
    for worker in running:
        member = members[worker.client_id]
        numbers = member.partition_numbers()
        seen.update(numbers)
        for topic in inputs:  # co-partitioned: number n of every input on one member
            if member.partitions_of(topic) != numbers:
                problems.append(f"{worker.name}: {topic} {sorted(member.partitions_of(topic))}")
        if len(numbers) != share:
            problems.append(f"{worker.name} holds {sorted(numbers)}, not {share} partitions")
        if worker.last_assigned() != sorted(numbers):
            problems.append(
                f"{worker.name} last logged {worker.last_assigned()}, the group says "
                f"{sorted(numbers)}"
            )
    if sorted(seen.elements()) != list(range(PARTITIONS)):
        problems.append(f"partition numbers held: {sorted(seen.elements())}")
    return problems


def wait_departed(bootstrap: str, prefix: str, worker: Worker, timeout: float) -> float:
    """Until the group no longer lists ``worker`` (stopped already); how long that took."""
    group_name = prefix + topics.STREAMS_APP_ID
    began = time.monotonic()
    while worker.client_id in asyncio.run(describe_group(bootstrap, group_name)).by_client_id():
        assert time.monotonic() - began < timeout, (
            f"{worker.name} still a member {timeout:.0f} s after it stopped: a static member "
            "stopped on purpose must leave the group, not wait for its session to expire"
        )
        time.sleep(0.1)
    return time.monotonic() - began


def wait_spread(
    bootstrap: str, prefix: str, running: Sequence[Worker], timeout: float = SPREAD_TIMEOUT_S
) -> dict[str, list[int]]:
    """Until the group is an even spread over the running workers; who holds what."""
    group_name = prefix + topics.STREAMS_APP_ID
    began = time.monotonic()
    while True:
        group = asyncio.run(describe_group(bootstrap, group_name))
        problems = spread_problems(group, running, prefix)
        if not problems:
            members = group.by_client_id()
            return {w.name: sorted(members[w.client_id].partition_numbers()) for w in running}
        for worker in running:
            worker.assert_running()
        assert time.monotonic() - began < timeout, (
            f"no even spread over {[w.name for w in running]} in {timeout:.0f} s: {problems}\n"
            + "\n".join(w.tail() for w in running)
        )
        time.sleep(0.5)


@dataclass
class Stages:
    """Each topology change and what followed it, printed at the end."""

    bootstrap: str
    prefix: str
    open_log: Callable[[], KafkaLog]
    load: SteadyLoad
    rows: list[dict[str, Any]] = field(default_factory=list)

    def check(self, change: str, running: Sequence[Worker], changed_at: float) -> None:
        """After a change: the load reached every partition of the loaded inputs again,
        the group committed every input partition up to the end offsets read then, and
        the assignment is an even spread over the running workers."""
        before = read_offsets(self.open_log, LOADED)
        self.load.wait_acks(ACKS_PER_STAGE, timeout=120, since=time.monotonic())
        targets = read_offsets(self.open_log, INPUTS)
        idle = {
            t: [p for p in range(PARTITIONS) if targets[t].get(p, 0) <= before[t].get(p, 0)]
            for t in LOADED
        }
        assert not any(idle.values()), f"the load did not reach every partition: {idle}"
        progress_s = wait_committed(self.open_log, targets, running)
        spread = wait_spread(self.bootstrap, self.prefix, running)
        self.rows.append(
            {
                "change": change,
                "workers": [w.name for w in running],
                "caught_up_s": round(time.monotonic() - changed_at, 1),
                "commit_wait_s": round(progress_s, 1),
                "assignment": spread,
            }
        )


def test_stream_workers_scale_out_and_in_under_load(
    kafka_bootstrap: str, prefix: str, upstream: UpstreamProcess, tmp_path: Path
) -> None:
    began = time.monotonic()
    open_log = new_log(kafka_bootstrap, prefix)
    workers = {
        name: Worker(name, kafka_bootstrap, prefix, tmp_path / name) for name in ("w1", "w2", "w3")
    }
    w1, w2, w3 = workers.values()
    reef: ReefProcess | None = None
    scenarios = scenario_names(f"scale-{uuid.uuid4().hex[:6]}", list(range(PARTITIONS)))
    try:
        ends = read_offsets(open_log, INPUTS)
        assert {t: len(e) for t, e in ends.items()} == dict.fromkeys(INPUTS, PARTITIONS), ends
        w1.start()
        reef = serve_kafka(kafka_bootstrap, prefix, upstream, tmp_path / "reef")
        create_scenarios(reef.base_url, scenarios)
        w1.wait_ready()
        assert sorted(partition_for(s.encode(), PARTITIONS) for s in scenarios) == list(
            range(PARTITIONS)
        )
        with SteadyLoad([reef.base_url], TOKEN, scenarios, rate=RATE) as load:
            stages = Stages(kafka_bootstrap, prefix, open_log, load)
            stages.check("one worker", [w1], time.monotonic())

            changed = time.monotonic()
            w2.start().wait_ready()
            stages.check("second worker joined", [w1, w2], changed)
            # w1 held every partition: each rebalance since gave it back a share of them,
            # whose stores it kept, reading nothing (no one else wrote their changelogs)
            since_join = w1.kept_stores()[1:]
            assert since_join, w1.tail(6000)
            for assigned, kept, read in since_join:
                assert (kept, read) == (assigned, 0), (since_join, w1.tail(6000))

            changed = time.monotonic()
            w3.start().wait_ready()
            stages.check("third worker joined", [w1, w2, w3], changed)

            changed = time.monotonic()
            status = w1.terminate()
            assert status == 0, f"w1 did not stop cleanly on SIGTERM\n{w1.tail(6000)}"
            departed_s = wait_departed(kafka_bootstrap, prefix, w1, DEPARTURE_S)
            stages.check("w1 stopped (SIGTERM)", [w2, w3], changed)

            changed = time.monotonic()
            w2.kill()
            stages.check("w2 killed (SIGKILL)", [w3], changed)
        result = load.result

        # the load is over: the last worker commits every input record
        wait_committed(open_log, read_offsets(open_log, INPUTS), [w3])
        report = consistency.check(open_log, result, scenarios, fate_timeout=120)
        print(
            "SCALE-OUT:",
            json.dumps(
                {
                    "stages": stages.rows,
                    "ready_s": {w.name: round(w.ready_s, 1) for w in workers.values()},
                    "w1_departed_s": round(departed_s, 2),
                    "kept_stores": {w.name: w.kept_stores() for w in (w1, w2)},
                    "load": result.summary(),
                    "log": report.summary(),
                    "seconds": round(time.monotonic() - began, 1),
                }
            ),
            flush=True,
        )
        # every acknowledged report has exactly one fate (joined), no sample twice
        report.assert_ok()
        assert report.samples >= len(result.reports), report.summary()
        # the survivor still holds every partition (the spread checks ran after each change)
        w3.assert_running()
        assert wait_spread(kafka_bootstrap, prefix, [w3]) == {"w3": list(range(PARTITIONS))}
    finally:
        if reef is not None:
            reef.stop()
        for worker in workers.values():
            worker.stop()


# ---------------------------------------------------------------------------
# Two trainers splitting the partitions of reef.samples

RECIPE = "tests.support.fake_recipe:FakeRecipe"
TRAINER_TOKEN = "reef-split-token"
BATCH = 4
SAMPLES_PER_SCENARIO = 8
#: partitions of reef.samples each trainer owns
OWNED = {"trainer-a": (0, 1, 2), "trainer-b": (3, 4, 5)}
TRAIN_TIMEOUT_S = 240.0


@pytest.fixture
def deployment(
    kafka_bootstrap: str, tmp_path: Path, upstream: UpstreamProcess
) -> Iterator[tuple[LearningDeployment, dict[str, str]]]:
    """``reef serve --log kafka`` and ``reef streams`` on a fresh prefix, no trainer."""
    config = tmp_path / "recipe.yaml"
    config.write_text(
        f"recipe:\n  batching: {{batch_size: {BATCH}}}\n"
        "  eligibility: {max_staleness: 1000}\n  train_seconds: 0.3\n"
    )
    env = {
        "REEF_TOKEN": TRAINER_TOKEN,
        "REEF_RECIPE": RECIPE,
        "REEF_RECIPE_CONFIG": str(config),
        "REEF_TRAINER_IN_PROCESS": "false",
    }
    with learning_deployment(
        "kafka",
        tmp_path,
        env,
        token=TRAINER_TOKEN,
        group=f"trainer:{RECIPE}",
        kafka_bootstrap=kafka_bootstrap,
        reef_args=("--upstream-url", upstream.v1_url),
        with_trainer=False,
    ) as found:
        yield found, env


@dataclass(frozen=True)
class Stored:
    partition: int
    event: Event


def read_topic(deployment: LearningDeployment, topic: str) -> list[Stored]:
    async def read() -> list[Stored]:
        log = deployment.open_log()
        try:
            return [
                Stored(s.record.partition, s.event)
                async for s in EventStore(log).read(topic)
                if s.event is not None
            ]
        finally:
            await log.close()

    return asyncio.run(read())


def last_status(trainer: ManagedProcess) -> dict[str, Any]:
    lines = [
        line.split(" status ", 1)[1]
        for line in trainer.stderr_text().splitlines()
        if " reef.trainer: status " in line
    ]
    assert lines, f"reef trainer logged no status\n{trainer.output()}"
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def test_two_trainers_split_the_sample_partitions(
    deployment: tuple[LearningDeployment, dict[str, str]], tmp_path: Path
) -> None:
    deployed, env = deployment
    began = time.monotonic()
    tag = f"split-{uuid.uuid4().hex[:6]}"
    # two scenarios in each trainer's half, on four distinct partitions
    scenarios = scenario_names(tag, [0, 2, 3, 5])
    partition_of = {s: partition_for(s.encode(), PARTITIONS) for s in scenarios}
    owner_of = {
        s: name for name, owned in OWNED.items() for s in scenarios if partition_of[s] in owned
    }
    assert sorted(Counter(owner_of.values()).values()) == [2, 2], owner_of

    assert deployed.kafka_bootstrap is not None
    flags = kafka_flags(deployed.kafka_bootstrap, deployed.topic_prefix)
    trainers: dict[str, ManagedProcess] = {}
    try:
        for name, owned in OWNED.items():
            args = [*flags, *itertools.chain.from_iterable(("--partition", str(p)) for p in owned)]
            trainers[name] = start_trainer(args, deployed.state_dir, env, tmp_path / "logs", name)
        for scenario in scenarios:
            record_corrections(deployed.base_url, TRAINER_TOKEN, scenario, SAMPLES_PER_SCENARIO)
        total = SAMPLES_PER_SCENARIO * len(scenarios)

        deadline = time.monotonic() + TRAIN_TIMEOUT_S
        while True:
            samples = [
                s for s in read_topic(deployed, topics.SAMPLES) if s.event.scenario in owner_of
            ]
            releases = [
                s.event
                for s in read_topic(deployed, topics.RELEASES)
                if s.event.scenario in owner_of
            ]
            trained = [
                sid
                for e in releases
                if isinstance(e, ReleaseCommitted) and e.operation == "training"
                for sid in e.sample_ids
            ]
            sample_ids = {s.event.event_id for s in samples}
            if (
                len(sample_ids) == total
                and set(trained) == sample_ids
                and deployed.trainer_caught_up(total)
            ):
                break
            assert time.monotonic() < deadline, (
                f"{len(set(trained))}/{total} samples trained ({len(sample_ids)} joined) in "
                f"{TRAIN_TIMEOUT_S:.0f} s\n" + "\n".join(t.output() for t in trainers.values())
            )
            deployed.alive()
            for trainer in trainers.values():
                assert trainer.running(), trainer.output()
            time.sleep(0.5)
        statuses = {}
        for name, trainer in trainers.items():  # a status line from after the last commit
            seen = trainer.stderr_text().count(" reef.trainer: status ")
            wait_until = time.monotonic() + 60
            while trainer.stderr_text().count(" reef.trainer: status ") <= seen:
                assert time.monotonic() < wait_until, trainer.output()
                time.sleep(0.2)
            statuses[name] = last_status(trainer)
    finally:
        for trainer in trainers.values():
            trainer.stop()

    # every sample on its scenario's partition, trained into exactly one release
    assert all(isinstance(s.event, SampleJoined) for s in samples)
    assert {s.partition for s in samples} == set(partition_of.values())
    for stored in samples:
        assert stored.partition == partition_of[stored.event.scenario], stored
    assert len(trained) == len(set(trained)) == total, "a sample trained twice, or not at all"

    # each trainer proposed (and logged training) only the scenarios of its partitions
    proposals = [
        s.event
        for s in read_topic(deployed, topics.RELEASE_PROPOSALS)
        if isinstance(s.event, ReleaseProposed) and s.event.scenario in owner_of
    ]
    assert len(proposals) == total // BATCH, proposals
    pids = {name: trainer.pid for name, trainer in trainers.items()}
    for proposal in proposals:
        owner = owner_of[proposal.scenario]
        assert proposal.producer.endswith(f"-{pids[owner]}"), (
            f"{proposal.scenario} (partition {partition_of[proposal.scenario]}) proposed by "
            f"{proposal.producer}, not by {owner} (pid {pids[owner]})"
        )
    for name, trainer in trainers.items():
        text = trainer.stderr_text()
        mine = {s for s in scenarios if owner_of[s] == name}
        logged = set(re.findall(r"training \d+ samples of (\S+) on release", text))
        assert logged == mine, f"{name} trained {sorted(logged)}, owns {sorted(mine)}"
        # it read the samples of its own partitions only, and committed only their offsets
        assert statuses[name]["samples_read"] == SAMPLES_PER_SCENARIO * len(mine), statuses[name]
        committed = {int(p) for p in statuses[name]["committed_offsets"]}
        assert committed <= set(OWNED[name]), f"{name} committed offsets of {committed}"
        assert {partition_of[s] for s in mine} <= committed, statuses[name]

    # per scenario: one line of releases, a full batch each, no chain rejection
    for scenario in scenarios:
        line = [e for e in releases if e.scenario == scenario and isinstance(e, ReleaseCommitted)]
        assert line[0].operation == "creation"
        for parent, child in itertools.pairwise(line):
            assert child.parent_release_id == parent.release_id
        assert [len(e.sample_ids) for e in line[1:]] == [BATCH] * (SAMPLES_PER_SCENARIO // BATCH)
    rejected = [e for e in releases if isinstance(e, ReleaseRejected)]
    assert not rejected, rejected
    print(
        "TRAINER-SPLIT:",
        json.dumps(
            {
                "scenarios": {s: [partition_of[s], owner_of[s]] for s in scenarios},
                "releases": len(proposals),
                "committed_offsets": {n: s["committed_offsets"] for n, s in statuses.items()},
                "seconds": round(time.monotonic() - began, 1),
            }
        ),
        flush=True,
    )
