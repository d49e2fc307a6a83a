"""A learning deployment for end-to-end tests, on the embedded log or on Kafka.

* ``embedded``: one ``reef serve`` (local tiny engine, its sidecar, the in-process
  trainer; the processors in its child process).
* ``kafka``: the same ``reef serve --log kafka`` (API, local engine, sidecar) and a
  ``reef trainer --log kafka`` process sharing ``reef serve``'s state dir (the local
  artifact store), on a topic prefix with a ``reef streams`` worker (join, release
  chain): their own, deleted at the end, or a :class:`KafkaLearningLog` that several
  deployments share (each on scenarios of its own).

What a test needs from either: the API (:attr:`LearningDeployment.base_url`), whether
the trainer group's committed offsets reached the end of ``reef.samples`` (it commits
them only after the chain's decision) and the trainer's progress counters (GET
/reef/status on the embedded log; the trainer's own periodic status line on Kafka).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from reef.core.topics import SAMPLES
from reef.log.base import EventLog
from reef.log.kafka import delete_prefixed_topics
from reef.testing.servers import (
    ManagedProcess,
    ReefProcess,
    clean_env,
    reef_executable,
    run_reef,
    spawn,
    start_reef,
)
from tests.support.streams import StreamsWorker, start_streams

#: the fake recipe (tests/support/fake_recipe.py) as a trainer names it
RECIPE = "tests.support.fake_recipe:FakeRecipe"
STATUS_EVERY_S = 1.0


@dataclass
class LearningDeployment:
    kind: str
    reef: ReefProcess
    token: str
    group: str
    kafka_bootstrap: str | None = None
    topic_prefix: str = ""
    trainer: ManagedProcess | None = None
    streams: ManagedProcess | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return self.reef.base_url

    @property
    def state_dir(self) -> Path:
        return self.reef.state_dir

    def open_log(self) -> EventLog:
        if self.kind == "kafka":
            from reef.log.kafka import KafkaLog

            assert self.kafka_bootstrap is not None
            return KafkaLog(
                self.kafka_bootstrap, topic_prefix=self.topic_prefix, client_id="reef-e2e-learning"
            )
        from reef.log.embedded import EmbeddedLog

        return EmbeddedLog(self.state_dir / "log.sqlite3")

    def alive(self) -> None:
        """Fail with the output of any part that exited."""
        for part in (self.reef.managed, self.trainer, self.streams):
            if part is not None:
                assert part.running(), part.output()

    def trainer_caught_up(self, min_samples: int = 1, scenario: str | None = None) -> bool:
        """The group's committed offsets are past the last record of ``reef.samples``
        (and there are ``min_samples``): every sample was decided (trained, gated, or skipped). On
        Kafka the end offset also counts transaction markers after the last record.
        ``scenario``: only its samples count (records are keyed by scenario), for a log
        shared with other scenarios' deployments."""
        key = scenario.encode() if scenario is not None else None

        async def check() -> bool:
            log = self.open_log()
            try:
                last: dict[int, int] = {}
                records = []
                async for record in log.read(SAMPLES):
                    if key is not None and record.key != key:
                        continue
                    last[record.partition] = record.offset + 1
                    records.append(record)
                done = await log.committed(self.group, SAMPLES)
            finally:
                await log.close()
            return len(records) >= min_samples and all(done.get(p, 0) >= e for p, e in last.items())

        result: bool = asyncio.run(check())
        return result

    def wait_trainer_done(
        self, min_samples: int = 1, timeout: float = 180.0, scenario: str | None = None
    ) -> None:
        """Wait for ``min_samples`` joined samples (of ``scenario``, if given: the join is
        asynchronous) and for the trainer to have decided all of them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.alive()
            if self.trainer_caught_up(min_samples, scenario):
                return
            time.sleep(0.5)
        raise AssertionError(
            f"the trainer did not finish the batch in time\n{self.trainer_output()}"
        )

    def trainer_status(self) -> dict[str, Any]:
        """The trainer's progress: GET /reef/status's ``trainer`` (in-process), else the
        last ``status {...}`` line ``reef trainer`` logged (no ``steps`` history)."""
        if self.trainer is None:
            headers = {"Authorization": f"Bearer {self.token}"}
            response = httpx.get(f"{self.base_url}/reef/status", headers=headers, timeout=30.0)
            response.raise_for_status()
            found: dict[str, Any] = response.json()["trainer"]
            return found
        lines = [
            line.split(" status ", 1)[1]
            for line in self.trainer.stderr_text().splitlines()
            if " reef.trainer: status " in line
        ]
        assert lines, f"reef trainer logged no status yet\n{self.trainer.output()}"
        last: dict[str, Any] = json.loads(lines[-1])
        return last

    def wait_trainer_status(self, timeout: float = 30.0) -> dict[str, Any]:
        """A status at least as recent as now (the trainer logs one every second)."""
        if self.trainer is None:
            return self.trainer_status()
        seen = self.trainer.stderr_text().count(" reef.trainer: status ")
        deadline = time.monotonic() + timeout
        while self.trainer.stderr_text().count(" reef.trainer: status ") <= seen:
            assert time.monotonic() < deadline, self.trainer.output()
            self.alive()
            time.sleep(0.2)
        return self.trainer_status()

    def trainer_log(self) -> str:
        if self.trainer is None:
            return self.reef.managed.stderr_text()
        return self.trainer.stderr_text()

    def trainer_output(self) -> str:
        return self.trainer.output() if self.trainer is not None else self.reef.output()


def kafka_flags(bootstrap: str, prefix: str) -> list[str]:
    return ["--log", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-topic-prefix", prefix]


def start_trainer(
    argv_log: list[str], state_dir: Path, env: Mapping[str, str], log_dir: Path, name: str
) -> ManagedProcess:
    """``reef trainer`` on the deployment's log and state dir (its artifact store)."""
    argv = [
        reef_executable(),
        "trainer",
        *argv_log,
        "--state-dir",
        str(state_dir),
        "--status-every",
        str(STATUS_EVERY_S),
    ]
    return spawn(argv, env=clean_env(env), log_dir=log_dir, name=name)


@dataclass(frozen=True)
class KafkaLearningLog:
    """A topic prefix holding Reef's topics and a ``reef streams`` worker on it: what
    learning deployments that differ only in scenario and recipe can share (each keeps its
    own ``reef serve``, whose engine follows one scenario, and its own trainer)."""

    bootstrap: str
    prefix: str
    streams: StreamsWorker


@contextlib.contextmanager
def kafka_learning_log(
    bootstrap: str, work: Path, streams_env: Mapping[str, str] | None = None
) -> Iterator[KafkaLearningLog]:
    """Create the topics under a fresh prefix and start ``reef streams`` on them (not
    waited on: a deployment waits for it after starting ``reef serve``; ``streams_env``
    adds its settings); at the end stop the worker and delete the topics."""
    prefix = f"t-learn-{uuid.uuid4().hex[:10]}-"
    created = run_reef("topics", "create", *kafka_flags(bootstrap, prefix))
    assert created.returncode == 0, f"reef topics create:\n{created.stdout}\n{created.stderr}"
    worker = start_streams(bootstrap, prefix, work / "streams", streams_env)
    try:
        yield KafkaLearningLog(bootstrap, prefix, worker)
    finally:
        worker.managed.stop(timeout=20)
        asyncio.run(delete_prefixed_topics(bootstrap, prefix))


@contextlib.contextmanager
def learning_deployment(
    kind: str,
    work: Path,
    env: Mapping[str, str],
    *,
    token: str,
    group: str,
    kafka_bootstrap: str | None = None,
    kafka_log: KafkaLearningLog | None = None,
    reef_args: tuple[str, ...] = (),
    with_trainer: bool = True,
    streams_env: Mapping[str, str] | None = None,
) -> Iterator[LearningDeployment]:
    """Start the deployment of ``kind`` (``env`` configures reef serve and the trainer).

    On Kafka it runs on ``kafka_log`` when given (shared: the caller owns it), else on
    topics and a ``reef streams`` worker of its own (from ``kafka_bootstrap``).
    ``with_trainer=False``: no ``reef trainer`` process on Kafka (a test starts its own
    with :func:`start_trainer`; on the embedded log ``env`` decides the in-process one).
    ``streams_env``: settings of its own ``reef streams`` worker (not of a shared one)."""
    state = work / "state"
    if kind == "embedded":
        served = start_reef(
            list(reef_args), env=env, state_dir=state, timeout=240.0, name="reef-learning"
        )
        try:
            yield LearningDeployment(kind, served, token, group)
        finally:
            served.stop()
        return

    with contextlib.ExitStack() as owned:
        if kafka_log is None:
            assert kafka_bootstrap is not None
            kafka_log = owned.enter_context(kafka_learning_log(kafka_bootstrap, work, streams_env))
        flags = kafka_flags(kafka_log.bootstrap, kafka_log.prefix)
        reef: ReefProcess | None = None
        trainer: ManagedProcess | None = None
        try:
            reef = start_reef(
                [*flags, *reef_args], env=env, state_dir=state, timeout=240.0, name="reef-learning"
            )
            kafka_log.streams.wait_ready()
            if with_trainer:
                trainer = start_trainer(flags, state, env, work / "logs", "trainer")
            yield LearningDeployment(
                kind,
                reef,
                token,
                group,
                kafka_bootstrap=kafka_log.bootstrap,
                topic_prefix=kafka_log.prefix,
                trainer=trainer,
                streams=kafka_log.streams.managed,
            )
        finally:
            if trainer is not None:
                trainer.stop()
            if reef is not None:
                reef.stop()


def record_corrections(
    base_url: str, token: str, scenario: str, count: int, timeout: float = 60.0
) -> None:
    """``count`` chat completions ("Return exactly: w<i>"), each reported with score 1 and
    its correction: the samples a fake or sft recipe trains on."""
    headers = {"Authorization": f"Bearer {token}", "x-reef-scenario": scenario}
    with httpx.Client(base_url=base_url, headers=headers, timeout=timeout) as client:
        for index in range(count):
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


def wait_for_line(process: ManagedProcess, text: str, after: int, timeout: float = 90.0) -> None:
    """Poll (every 10 ms) until ``text`` occurs more than ``after`` times in stderr."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.running(), process.output()
        if process.stderr_text().count(text) > after:
            return
        time.sleep(0.01)
    raise AssertionError(f"no {text!r} within {timeout}s\n{process.output()}")
