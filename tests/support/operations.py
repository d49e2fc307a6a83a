"""The operations end-to-end tests' deployment and its mixed history.

:func:`run_workload` gives a deployment a mixed history once: two scenarios, inferences,
reports with every cheap fate (accepted, consumed by a release, rejected as
``already_consumed`` / ``no_references`` / ``foreign_reference``), two training releases
proposed as a trainer would (artifacts in the local store, sample ids), a stale proposal
the chain rejects, and a rollback through the API; the :class:`History` names its parts.
:func:`embedded_deployment` is one embedded ``reef serve`` on a state dir, with an admin
and a read token (:func:`deployment_env`); :func:`kafka_deployment` the same on Kafka, with
``reef streams``, under a topic prefix of its own.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reef.artifacts import LocalArtifactStore
from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.events import ReleaseRejected, SampleJoined
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import KafkaLog, delete_prefixed_topics
from reef.testing.servers import ReefProcess, UpstreamProcess, run_reef, start_reef
from tests.support.deployment import Deployment
from tests.support.streams import start_streams

# ---------------------------------------------------------------------------
# The mixed workload (run once per deployment)


@dataclass
class History:
    a: str
    b: str
    receipts_a: list[str]
    receipts_b: list[str]
    #: report id → scenario, and the fates the join must give them
    reports: dict[str, str]
    expected: dict[str, tuple[str, str | None]]
    #: names of some reports, for the tests
    consumed_1: str
    consumed_2: str
    accepted: str
    rejected_again: str
    #: report id → sample id (SampleJoined.event_id)
    samples: dict[str, str]
    creation: dict[str, Any]
    train_1: dict[str, Any]
    train_2: dict[str, Any]
    rolled_back: dict[str, Any]
    stale_proposal: str


def run_workload(dep: Deployment, prefix: str) -> History:
    a = dep.create_scenario(f"{prefix}-a")
    b = dep.create_scenario(f"{prefix}-b")
    creation = dep.head(a)
    receipts_a = [dep.infer(a, f"{prefix} question {i} {uuid.uuid4().hex}") for i in range(4)]
    receipts_b = [dep.infer(b, f"{prefix} other {i}") for i in range(2)]

    reports: dict[str, str] = {}
    expected: dict[str, tuple[str, str | None]] = {}

    def report(scenario: str, refs: list[str], fate: tuple[str, str | None]) -> str:
        rid = dep.report(scenario, refs)
        reports[rid] = scenario
        expected[rid] = fate
        return rid

    consumed_1 = report(a, [receipts_a[0]], ("consumed", None))
    consumed_2 = report(a, [receipts_a[1]], ("consumed", None))
    accepted = report(a, [receipts_a[2], receipts_a[3]], ("accepted", None))
    report(b, [receipts_b[0]], ("accepted", None))
    rejected_again = report(a, [receipts_a[0]], ("rejected", "already_consumed"))
    report(a, [], ("rejected", "no_references"))
    report(a, [receipts_b[1]], ("rejected", "foreign_reference"))
    fates = dep.wait_fates(reports)
    assert {rid: (f["status"], f["reason"]) for rid, f in fates.items()} == {
        rid: ("accepted" if status == "consumed" else status, reason)
        for rid, (status, reason) in expected.items()
    }

    samples = {
        e.report_id: e.event_id
        for e in dep.events(topics.SAMPLES)
        if isinstance(e, SampleJoined) and e.scenario in (a, b)
    }
    assert set(samples) == {rid for rid, (s, _) in expected.items() if s != "rejected"}

    files_1 = {"adapter/weights.bin": os.urandom(64 * 1024), "system_prompt.md": b"You are v1.\n"}
    files_2 = {"adapter/weights.bin": os.urandom(48 * 1024), "system_prompt.md": b"You are v2.\n"}
    content_1 = dep.content.publish_files(dict(files_1))
    content_2 = dep.content.publish_files(dict(files_2))
    train_1 = dep.propose_training(a, content_1, [samples[consumed_1]])
    train_2 = dep.propose_training(a, content_2, [samples[consumed_2]])
    # a trainer that lost the race: its parent is no longer the head
    stale = dep.propose(
        a, dep.content.publish_files({"late.md": "late"}), [], parent=train_1["release_id"]
    )
    rolled_back = dep.rollback(a, train_1["release_id"])
    assert rolled_back["content_id"] == content_1
    assert rolled_back["parent_release_id"] == train_2["release_id"]

    def decided() -> bool:
        return any(
            isinstance(e, ReleaseRejected) and e.proposal_id == stale
            for e in dep.events(topics.RELEASES)
        )

    deadline = time.monotonic() + dep.decide_timeout
    while not decided():
        assert time.monotonic() < deadline, "the stale proposal was not rejected in time"
        time.sleep(0.2)
    fates = dep.wait_fates(reports)
    assert {rid: (f["status"], f["reason"]) for rid, f in fates.items()} == expected
    assert fates[consumed_1]["release_id"] == train_1["release_id"]
    assert fates[consumed_2]["release_id"] == train_2["release_id"]
    return History(
        a=a,
        b=b,
        receipts_a=receipts_a,
        receipts_b=receipts_b,
        reports=reports,
        expected=expected,
        consumed_1=consumed_1,
        consumed_2=consumed_2,
        accepted=accepted,
        rejected_again=rejected_again,
        samples=samples,
        creation=creation,
        train_1=train_1,
        train_2=train_2,
        rolled_back=rolled_back,
        stale_proposal=stale,
    )


def deployment_env(admin: str, reader: str) -> dict[str, str]:
    return {
        "REEF_TOKEN": admin,
        "REEF_TOKENS": f"{reader}:read",
        "REEF_UPSTREAM_API_KEY": f"sk-upstream-{secrets.token_hex(8)}",
    }


@contextmanager
def embedded_deployment(
    upstream: UpstreamProcess, state_dir: Path, env: dict[str, str] | None = None
) -> Iterator[Deployment]:
    """An embedded ``reef serve`` on ``state_dir`` (``env``: more settings), stopped on
    leaving."""
    admin, reader = f"adm-{secrets.token_hex(8)}", f"rd-{secrets.token_hex(8)}"
    process = start_reef(
        ["--upstream-url", upstream.v1_url],
        env={**deployment_env(admin, reader), **(env or {})},
        state_dir=state_dir,
    )
    try:
        yield Deployment(
            name="embedded",
            process=process,
            admin_token=admin,
            read_token=reader,
            new_log=lambda: EmbeddedLog(state_dir / "log.sqlite3"),
            content=ContentStore(LocalArtifactStore.in_state_dir(state_dir)),
            log_flags=["--state-dir", str(state_dir)],
        )
    finally:
        process.stop()


@contextmanager
def kafka_deployment(
    upstream: UpstreamProcess, bootstrap: str, work: Path, env: dict[str, str] | None = None
) -> Iterator[Deployment]:
    """``reef serve`` and ``reef streams`` on Kafka under a topic prefix of their own
    (artifacts in ``work/state``); on leaving both stop and the topics are deleted."""
    admin, reader = f"adm-{secrets.token_hex(8)}", f"rd-{secrets.token_hex(8)}"
    prefix = f"t-ops-{uuid.uuid4().hex[:10]}-"
    kafka = ["--log", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-topic-prefix", prefix]
    state = work / "state"
    flags = [*kafka, "--state-dir", str(state)]
    created = run_reef("topics", "create", *flags)
    assert created.returncode == 0, f"reef topics create:\n{created.stdout}\n{created.stderr}"
    worker = start_streams(bootstrap, prefix, work / "streams")
    process: ReefProcess | None = None
    try:
        process = start_reef(
            [*kafka, "--upstream-url", upstream.v1_url],
            env={**deployment_env(admin, reader), **(env or {})},
            state_dir=state,
        )
        worker.wait_ready()
        yield Deployment(
            name="kafka",
            process=process,
            admin_token=admin,
            read_token=reader,
            new_log=lambda: KafkaLog(bootstrap, topic_prefix=prefix, client_id="reef-e2e-ops"),
            content=ContentStore(LocalArtifactStore.in_state_dir(state)),
            log_flags=flags,
            decide_timeout=60.0,
        )
    finally:
        if process is not None:
            process.stop()
        worker.managed.stop(timeout=20)
        asyncio.run(delete_prefixed_topics(bootstrap, prefix))
