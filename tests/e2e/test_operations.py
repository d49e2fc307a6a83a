"""Operator tooling end to end: audit, export, disaster recovery, metrics and status.

One embedded ``reef serve`` (module-scoped) gets a mixed history once: two scenarios,
inferences, reports with every cheap fate (accepted, consumed by a release, rejected as
``already_consumed`` / ``no_references`` / ``foreign_reference``), two training releases
proposed as a trainer would (artifacts in the local store, sample ids), a stale proposal
the chain rejects, and a rollback through the API. On it:

* ``reef audit verify`` is OK on the clean history; on copies of the state dir it names a
  release event tampered in place, a forged commit, a deleted or corrupted artifact
  object, a deleted manifest and a sample whose references are not recorded exchanges of
  its scenario, and exits 1; ``reef audit trail`` follows a receipt to its reports,
  sample, the release that trained on it and an engine that loaded that release;
* ``reef export`` to Parquet and JSONL holds exactly the topic's events (envelope, type,
  position, fields); ``--since`` filters (also given as ISO 8601 with an offset);
* ``/metrics`` has a non-zero value in every family; ``reef status`` renders.

Disaster recovery runs on Kafka (its own topic prefix, a ``reef streams`` worker): after
the same workload the server is stopped and its state dir wiped; ``reef replay
--compare-live`` agrees with the worker's state, and a fresh server on an empty state dir
answers the same heads and report fates, with ``reef.samples`` unchanged (and equal to
what re-running the join over the inputs derives).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reef.artifacts import LocalArtifactStore
from reef.artifacts.content import ContentStore
from reef.codec import EventCodec
from reef.core import topics
from reef.core.events import (
    EngineLoaded,
    Event,
    ReleaseCommitted,
    ReleaseRejected,
    ReportRejected,
    SampleJoined,
    utc_now,
)
from reef.core.ids import EMPTY_CONTENT_ID, new_receipt, release_id
from reef.core.join import JoinProcessor
from reef.core.state import DictState
from reef.hosts import READY_LINE
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import delete_prefixed_topics
from reef.services.eventstore import EventStore, StoredEvent
from reef.services.replay import _all_records
from reef.testing.servers import (
    ManagedProcess,
    ReefProcess,
    UpstreamProcess,
    clean_env,
    reef_executable,
    run_reef,
    start_reef,
)
from tests.support.deployment import Deployment

#: a stopped worker's partitions are handed over quickly
WORKER_ENV = {"REEF_STREAMS_SESSION_TIMEOUT_S": "6"}


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


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


# ---------------------------------------------------------------------------
# The embedded deployment and its history


@pytest.fixture(scope="module")
def embedded(
    upstream: UpstreamProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    state_dir = tmp_path_factory.mktemp("ops-embedded")
    admin, reader = f"adm-{secrets.token_hex(8)}", f"rd-{secrets.token_hex(8)}"
    process = start_reef(
        ["--upstream-url", upstream.v1_url],
        env=deployment_env(admin, reader),
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


@pytest.fixture(scope="module")
def history(embedded: Deployment) -> History:
    return run_workload(embedded, "ops")


# ---------------------------------------------------------------------------
# reef audit verify


def verify(state_dir: Path, *extra: str) -> tuple[int, list[str], str]:
    """(exit code, FAIL lines, summary line) of ``reef audit verify`` on a state dir."""
    result = run_reef("audit", "verify", "--state-dir", str(state_dir), *extra)
    lines = result.stdout.splitlines()
    assert lines, f"no output\n{result.stdout}\n{result.stderr}"
    fails = [line for line in lines if line.startswith("FAIL ")]
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, fails, lines[-1]


def copy_state(src: Path, dest: Path) -> Path:
    """A consistent copy of an embedded state dir (SQLite online backup + artifacts)."""
    dest.mkdir(parents=True)
    source = sqlite3.connect(src / "log.sqlite3")
    target = sqlite3.connect(dest / "log.sqlite3")
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()
    shutil.copytree(src / "artifacts", dest / "artifacts")
    return dest


def committed_releases(dep: Deployment) -> list[ReleaseCommitted]:
    return [e for e in dep.events(topics.RELEASES) if isinstance(e, ReleaseCommitted)]


def test_audit_verify_passes_on_a_clean_history(embedded: Deployment, history: History) -> None:
    commits = committed_releases(embedded)
    samples = [e for e in embedded.events(topics.SAMPLES) if isinstance(e, SampleJoined)]
    contents = {c.content_id for c in commits} - {EMPTY_CONTENT_ID}
    objects = sum(len(embedded.content.load(cid)) for cid in contents)
    assert objects >= 4  # two training releases, two files each
    mine = [c for c in commits if c.scenario == history.a]
    assert [c.operation for c in mine] == ["creation", "training", "training", "rollback"]

    for extra in ((), ("--shallow",)):
        code, fails, summary = verify(embedded.state_dir, *extra)
        assert (code, fails) == (0, []), summary
        assert summary == (
            f"{len(commits)} release(s), {objects} artifact object(s), {len(samples)} sample(s): OK"
        )


def _rewrite_release(state_dir: Path, wanted: str, **changes: Any) -> None:
    """Rewrite one ReleaseCommitted record in place (what someone with DB access could do)."""
    codec = EventCodec()
    db = sqlite3.connect(state_dir / "log.sqlite3")
    try:
        rows = db.execute(
            'SELECT partition, "offset", value FROM records WHERE topic = ?', (topics.RELEASES,)
        ).fetchall()
        hits = 0
        for partition, offset, value in rows:
            event = codec.decode(value)
            if isinstance(event, ReleaseCommitted) and event.release_id == wanted:
                forged, _ = codec.encode(dataclasses.replace(event, **changes))
                db.execute(
                    "UPDATE records SET value = ? "
                    'WHERE topic = ? AND partition = ? AND "offset" = ?',
                    (forged, topics.RELEASES, partition, offset),
                )
                hits += 1
        db.commit()
        assert hits == 1, f"release {wanted} found {hits} time(s)"
    finally:
        db.close()


def _append(state_dir: Path, *events: Event) -> None:
    async def write() -> None:
        log = EmbeddedLog(state_dir / "log.sqlite3")
        await log.start()
        try:
            await EventStore(log).append_all(list(events))
        finally:
            await log.close()

    _run(write())


def test_audit_verify_names_a_release_event_tampered_in_place(
    embedded: Deployment, history: History, tmp_path: Path
) -> None:
    copy = copy_state(embedded.state_dir, tmp_path / "state")
    train_2 = history.train_2
    # the event now claims train_1's content under train_2's id
    _rewrite_release(copy, train_2["release_id"], content_id=history.train_1["content_id"])
    code, fails, summary = verify(copy)
    expected = release_id(
        history.a, train_2["parent_release_id"], history.train_1["content_id"], "training"
    )
    assert code == 1
    assert fails == [
        f"FAIL {history.a}: release {train_2['release_id']} does not match its hash "
        f"(expected {expected}): tampered"
    ]
    assert summary.endswith(": 1 problem(s)"), summary


def test_audit_verify_names_a_forged_release_commit(
    embedded: Deployment, history: History, tmp_path: Path
) -> None:
    copy = copy_state(embedded.state_dir, tmp_path / "state")
    forged_id = uuid.uuid4().hex
    head = history.rolled_back["release_id"]
    _append(
        copy,
        ReleaseCommitted(
            event_id=uuid.uuid4().hex,
            scenario=history.a,
            occurred_at=utc_now(),
            producer="intruder",
            release_id=forged_id,
            proposal_id=uuid.uuid4().hex,
            parent_release_id=head,
            content_id=history.train_2["content_id"],
            operation="training",
        ),
    )
    code, fails, _ = verify(copy)
    expected = release_id(history.a, head, history.train_2["content_id"], "training")
    assert code == 1
    assert fails == [
        f"FAIL {history.a}: release {forged_id} does not match its hash "
        f"(expected {expected}): tampered"
    ]


def _object_of(dep: Deployment, content_id: str, path: str) -> str:
    oid: str = dep.content.load(content_id)[path].oid
    return oid


def test_audit_verify_names_a_missing_artifact_object(
    embedded: Deployment, history: History, tmp_path: Path
) -> None:
    copy = copy_state(embedded.state_dir, tmp_path / "state")
    oid = _object_of(embedded, history.train_2["content_id"], "adapter/weights.bin")
    store = LocalArtifactStore.in_state_dir(copy)
    store.object_path(oid).unlink()
    where = f"FAIL {history.a}: release {history.train_2['release_id']}: adapter/weights.bin"

    code, fails, summary = verify(copy)
    assert code == 1
    assert fails == [f"{where} ({oid}): artifact object {oid} not found"]
    assert summary.endswith(": 1 problem(s)"), summary
    code, fails, _ = verify(copy, "--shallow")
    assert code == 1
    assert fails == [f"{where} ({oid}): missing"]


def test_audit_verify_names_a_corrupt_object_and_a_missing_manifest(
    embedded: Deployment, history: History, tmp_path: Path
) -> None:
    copy = copy_state(embedded.state_dir, tmp_path / "state")
    store = LocalArtifactStore.in_state_dir(copy)
    oid = _object_of(embedded, history.train_1["content_id"], "adapter/weights.bin")
    path = store.object_path(oid)
    flipped = bytearray(path.read_bytes())
    flipped[100] ^= 0xFF
    path.unlink()
    path.write_bytes(bytes(flipped))  # same size, other bytes
    code, fails, _ = verify(copy)
    assert code == 1
    (fail,) = fails  # train_1 and its rollback share the content: reported once
    assert fail.startswith(f"FAIL {history.a}: release {history.train_1['release_id']}: ")
    assert f"adapter/weights.bin ({oid}): artifact object {oid} is corrupt: sha256 is " in fail
    # shallow checks presence only: a same-size corruption passes
    code, fails, summary = verify(copy, "--shallow")
    assert (code, fails) == (0, []), summary

    manifest = history.train_2["content_id"]
    store.object_path(manifest).unlink()
    code, fails, _ = verify(copy, "--shallow")
    assert code == 1
    assert fails == [
        f"FAIL {history.a}: release {history.train_2['release_id']}: manifest {manifest} "
        f"unreadable: artifact object {manifest} not found"
    ]


def test_audit_verify_names_samples_with_unrecorded_references(
    embedded: Deployment, history: History, tmp_path: Path
) -> None:
    copy = copy_state(embedded.state_dir, tmp_path / "state")
    absent = new_receipt(history.a)  # well-formed, never recorded
    foreign = history.receipts_b[1]  # recorded, but in the other scenario
    sample_id = uuid.uuid4().hex
    _append(
        copy,
        SampleJoined(
            event_id=sample_id,
            scenario=history.a,
            occurred_at=utc_now(),
            producer="intruder",
            report_id=uuid.uuid4().hex,
            references=[absent, foreign],
            trajectory_json="[]",
            score=1.0,
            feedback_json='"forged"',
            metadata_json="{}",
            release_ids=[],
        ),
    )
    code, fails, summary = verify(copy)
    assert code == 1
    assert fails == [
        f"FAIL {history.a}: sample {sample_id} references {ref}, "
        "which is not a recorded exchange of this scenario"
        for ref in (absent, foreign)
    ]
    assert summary.endswith(": 2 problem(s)"), summary


# ---------------------------------------------------------------------------
# reef audit trail


def test_audit_trail_follows_a_receipt_to_its_release_and_engine(
    embedded: Deployment, history: History
) -> None:
    receipt = history.receipts_a[0]
    train_1 = history.train_1["release_id"]
    engine_id = f"engine-{uuid.uuid4().hex[:8]}"
    embedded.append(
        EngineLoaded(
            event_id=uuid.uuid4().hex,
            scenario=history.a,
            occurred_at=utc_now(),
            producer="ops-test-sidecar",
            engine_id=engine_id,
            release_id=train_1,
            weight_version="v1",
            method="disk",
            load_ms=12.5,
        )
    )
    result = embedded.cli("audit", "trail", receipt)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    body = json.loads(result.stdout)
    assert set(body) == {"record", "reports", "samples", "releases", "engines"}

    record = body["record"]
    assert record["type"] == "InferenceRecorded"
    assert record["event_id"] == receipt and record["scenario"] == history.a
    assert record["release_id"] == history.creation["release_id"]
    assert datetime.fromisoformat(record["occurred_at"]).tzinfo is not None
    # the report that was joined, and the later one rejected as already_consumed
    assert [r["event_id"] for r in body["reports"]] == [
        history.consumed_1,
        history.rejected_again,
    ]
    assert all(r["type"] == "ReportSubmitted" for r in body["reports"])
    (sample,) = body["samples"]
    assert sample["type"] == "SampleJoined"
    assert sample["event_id"] == history.samples[history.consumed_1]
    assert sample["report_id"] == history.consumed_1
    assert sample["references"] == [receipt]
    (release,) = body["releases"]
    assert release["type"] == "ReleaseCommitted"
    assert release["release_id"] == train_1
    assert sample["event_id"] in release["sample_ids"]
    assert [(e["engine_id"], e["release_id"]) for e in body["engines"]] == [(engine_id, train_1)]

    # a receipt nobody consumed: the record and its report, nothing after
    lone = embedded.cli("audit", "trail", history.receipts_a[2])
    assert lone.returncode == 0, lone.stderr
    lone_body = json.loads(lone.stdout)
    assert [r["event_id"] for r in lone_body["reports"]] == [history.accepted]
    assert len(lone_body["samples"]) == 1
    assert lone_body["releases"] == [] and lone_body["engines"] == []

    unknown = embedded.cli("audit", "trail", uuid.uuid4().hex)
    assert unknown.returncode != 0
    assert "no recorded exchange" in unknown.stderr


# ---------------------------------------------------------------------------
# reef export

ENVELOPE = ["type", "partition", "offset", "event_id", "scenario", "occurred_at", "producer"]
SAMPLE_COLUMNS = [
    *ENVELOPE,
    "report_id",
    "references",
    "trajectory_json",
    "score",
    "feedback_json",
    "metadata_json",
    "release_ids",
    "reporter",
    "reason",
    "detail",
]


def _expected_columns(topic: str) -> list[str]:
    from reef.core.events import EVENT_TYPES

    names = list(ENVELOPE)
    for event_type in topics.TOPIC_EVENTS[topic]:
        for f in dataclasses.fields(EVENT_TYPES[event_type]):
            if f.name not in names:
                names.append(f.name)
    return names


def _positions(stored: list[StoredEvent]) -> dict[str, tuple[str, int, int]]:
    return {
        s.event.event_id: (s.event.type_name(), s.record.partition, s.record.offset)
        for s in stored
        if s.event is not None
    }


def export(
    dep: Deployment, topic: str, fmt: str, output: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    result = dep.cli("export", "--topic", topic, "--format", fmt, "-o", str(output), *extra)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result


def test_export_parquet_round_trips_every_topic(
    embedded: Deployment, history: History, tmp_path: Path
) -> None:
    assert _expected_columns(topics.SAMPLES) == SAMPLE_COLUMNS
    for topic in topics.ALL_TOPICS:
        stored = embedded.stored(topic)
        output = tmp_path / f"{topic}.parquet"
        result = export(embedded, topic, "parquet", output)
        assert f"{len(stored)} event(s) of {topic} written to {output}" in result.stdout
        table = pq.read_table(output)
        assert table.column_names == _expected_columns(topic), topic
        assert table.num_rows == len(stored), topic
        rows = table.to_pylist()
        assert {
            r["event_id"]: (r["type"], r["partition"], r["offset"]) for r in rows
        } == _positions(stored), topic
        if topic == topics.ENGINE and not stored:
            continue
        assert len(rows) > 0, f"the workload wrote nothing to {topic}"

    # the mixed topic: both event types, absent fields null, values as the events hold them
    rows = pq.read_table(tmp_path / f"{topics.SAMPLES}.parquet").to_pylist()
    by_id = {r["event_id"]: r for r in rows}
    types = Counter(r["type"] for r in rows if r["scenario"] in (history.a, history.b))
    assert types == {"SampleJoined": 4, "ReportRejected": 3}
    for event in embedded.events(topics.SAMPLES):
        row = by_id[event.event_id]
        assert row["occurred_at"] == event.occurred_at
        assert row["scenario"] == event.scenario and row["producer"] == event.producer
        if isinstance(event, SampleJoined):
            assert row["references"] == event.references
            assert row["score"] == event.score
            assert row["report_id"] == event.report_id
            assert row["trajectory_json"] == event.trajectory_json
            assert row["reason"] is None and row["detail"] is None
        else:
            assert isinstance(event, ReportRejected)
            assert row["reason"] == event.reason and row["report_id"] == event.report_id
            assert row["references"] is None and row["trajectory_json"] is None
    reasons = {r["reason"] for r in rows if r["scenario"] == history.a and r["reason"]}
    assert reasons == {"already_consumed", "no_references", "foreign_reference"}

    # releases: commits and the rejected stale proposal; inference: tags as JSON text
    releases = pq.read_table(tmp_path / f"{topics.RELEASES}.parquet").to_pylist()
    (stale,) = [r for r in releases if r["proposal_id"] == history.stale_proposal]
    assert stale["type"] == "ReleaseRejected" and stale["reason"] == "stale_parent"
    (train,) = [r for r in releases if r["release_id"] == history.train_1["release_id"]]
    assert train["sample_ids"] == [history.samples[history.consumed_1]]
    assert train["content_id"] == history.train_1["content_id"]
    inference = pq.read_table(tmp_path / f"{topics.INFERENCE}.parquet").to_pylist()
    (first,) = [r for r in inference if r["event_id"] == history.receipts_a[0]]
    assert first["status"] == 200 and first["stream"] is False
    assert isinstance(first["tags"], str) and isinstance(json.loads(first["tags"]), dict)
    assert json.loads(first["request_json"])["messages"][0]["content"].startswith("ops question 0")


def test_export_jsonl_and_since(embedded: Deployment, history: History, tmp_path: Path) -> None:
    stored = embedded.stored(topics.SAMPLES)
    output = tmp_path / "samples.jsonl"
    export(embedded, topics.SAMPLES, "jsonl", output)
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(lines) == len(stored)
    assert {x["event_id"]: (x["type"], x["partition"], x["offset"]) for x in lines} == _positions(
        stored
    )
    for line, s in zip(lines, stored, strict=True):
        assert s.event is not None
        assert line["event_id"] == s.event.event_id
        assert datetime.fromisoformat(line["occurred_at"]) == s.event.occurred_at
        expected = json.loads(json.dumps(dataclasses.asdict(s.event), default=str))
        expected["occurred_at"] = line["occurred_at"]
        assert {k: line[k] for k in expected} == expected
        assert set(line) == {*expected, "type", "partition", "offset"}

    # --since: events from a whole second on; some before it, some after
    scenario = embedded.create_scenario("ops-since")
    embedded.infer(scenario, "before the cut")
    cut = (utc_now() + timedelta(seconds=1)).replace(microsecond=0)
    time.sleep(max(0.0, (cut - utc_now()).total_seconds()) + 0.05)
    embedded.infer(scenario, "after the cut")
    embedded.infer(scenario, "after the cut, again")
    everything = embedded.events(topics.INFERENCE)
    after = {e.event_id for e in everything if e.occurred_at >= cut}
    assert 2 <= len(after) < len(everything)

    naive = cut.replace(tzinfo=None).isoformat()  # read as UTC
    since_jsonl = tmp_path / "since.jsonl"
    export(embedded, topics.INFERENCE, "jsonl", since_jsonl, "--since", naive)
    got = [json.loads(line) for line in since_jsonl.read_text().splitlines()]
    assert {x["event_id"] for x in got} == after
    since_parquet = tmp_path / "since.parquet"
    export(embedded, topics.INFERENCE, "parquet", since_parquet, "--since", naive)
    assert set(pq.read_table(since_parquet).column("event_id").to_pylist()) == after

    # ISO 8601 with an offset names the same instant
    for spelled in (
        cut.isoformat(),  # ...+00:00
        cut.strftime("%Y-%m-%dT%H:%M:%SZ"),
        (cut + timedelta(hours=2)).replace(tzinfo=None).isoformat() + "+02:00",
        cut.replace(tzinfo=None).isoformat(timespec="milliseconds"),
    ):
        aware = tmp_path / "aware.jsonl"
        export(embedded, topics.INFERENCE, "jsonl", aware, "--since", spelled)
        assert {json.loads(x)["event_id"] for x in aware.read_text().splitlines()} == after, spelled

    future = tmp_path / "future.parquet"
    result = export(embedded, topics.INFERENCE, "parquet", future, "--since", "2999-01-01T00:00:00")
    assert "0 event(s)" in result.stdout
    empty = pq.read_table(future)
    assert empty.num_rows == 0
    assert empty.column_names == _expected_columns(topics.INFERENCE)

    bad = embedded.cli(
        "export", "--topic", topics.INFERENCE, "-o", str(tmp_path / "x"), "--since", "yesterday"
    )
    assert bad.returncode == 2 and "since" in bad.stderr.lower()


# ---------------------------------------------------------------------------
# /metrics and reef status


def scrape(dep: Deployment) -> dict[str, Any]:
    with dep.client(token=dep.read_token) as client:
        response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(response.text)}


def values(family: Any, suffix: str = "") -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for s in family.samples
        if s.name == family.name + suffix
    }


def test_metrics_show_every_family(embedded: Deployment, history: History) -> None:
    with embedded.client() as client:
        anonymous = httpx.get(f"{embedded.base_url}/metrics")
        assert anonymous.status_code == 401
        client.get("/reef/status")
    families = scrape(embedded)

    requests = families["reef_requests"]
    assert requests.type == "counter"
    chat = values(requests, "_total")
    key = (("dialect", "openai"), ("route", "/v1/chat/completions"), ("status", "200"))
    assert chat[key] >= len(history.receipts_a) + len(history.receipts_b)
    for name in ("reef_request_seconds", "reef_upstream_seconds", "reef_log_append_seconds"):
        family = families[name]
        assert family.type == "histogram", name
        assert sum(values(family, "_count").values()) > 0, name
        assert sum(values(family, "_sum").values()) > 0, name
    upstream = values(families["reef_upstream_seconds"], "_count")
    assert upstream[(("route", "/v1/chat/completions"),)] >= len(history.receipts_a)

    fates = values(families["reef_report_fates"], "_total")
    statuses = Counter(status for status, _ in history.expected.values())
    for status, count in statuses.items():
        assert fates[(("status", status),)] >= count, (status, fates)
    pending = values(families["reef_samples_pending"])[()]
    assert families["reef_samples_pending"].type == "gauge"
    assert pending >= 2  # the accepted, never-trained samples of both scenarios
    candidates = values(families["reef_candidates"], "_total")
    assert candidates[(("outcome", "committed"),)] >= 2
    assert candidates[(("outcome", "rejected"),)] >= 1
    lag = families["reef_processor_lag"]
    assert lag.type == "gauge"
    series = values(lag)
    assert {dict(k)["processor"] for k in series} == {"join", "chain"}, series
    assert all(v >= 0 for v in series.values())

    # engine loads follow reef.engine: one EngineLoaded makes the counter move
    before = values(families["reef_engine_loads"], "_total").get((("outcome", "loaded"),), 0)
    embedded.append(
        EngineLoaded(
            event_id=uuid.uuid4().hex,
            scenario=history.a,
            occurred_at=utc_now(),
            producer="ops-test-sidecar",
            engine_id=f"metrics-{uuid.uuid4().hex[:8]}",
            release_id=history.rolled_back["release_id"],
            weight_version="v2",
            method="nccl",
            load_ms=3.0,
        )
    )
    deadline = time.monotonic() + 15
    while True:
        loads = values(scrape(embedded)["reef_engine_loads"], "_total")
        if loads.get((("outcome", "loaded"),), 0) >= before + 1:
            break
        assert time.monotonic() < deadline, f"engine loads did not move: {loads}"
        time.sleep(0.2)
    assert loads[(("outcome", "loaded"),)] > 0

    with embedded.client(token=embedded.read_token) as client:
        answer = client.get("/reef/status")
    assert answer.status_code == 200, answer.text
    assert answer.json()["samples_pending"] == values(scrape(embedded)["reef_samples_pending"])[()]


def test_reef_status_renders(embedded: Deployment, history: History) -> None:
    with embedded.client(token=embedded.read_token) as client:
        body = client.get("/reef/status").json()
    info = body["scenarios"][history.a]
    assert info["head_release_id"] == history.rolled_back["release_id"]
    assert info["releases"] == 4
    assert body["log"] == "embedded"

    result = run_reef(
        "status",
        "--url",
        embedded.base_url,
        "--token",
        embedded.read_token,
        env={"COLUMNS": "200"},
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    out = result.stdout
    assert history.a in out and history.b in out
    assert history.rolled_back["release_id"][:16] in out
    assert "embedded" in out and "samples pending" in out
    for processor in ("join", "chain"):
        assert processor in out

    by_env = run_reef("status", "--url", embedded.base_url, env={"REEF_TOKEN": embedded.read_token})
    assert by_env.returncode == 0, by_env.stderr
    refused = run_reef("status", "--url", embedded.base_url, "--token", "wrong")
    assert refused.returncode == 1 and "401" in refused.stderr


# ---------------------------------------------------------------------------
# Disaster recovery on Kafka


@dataclass
class StreamsWorker:
    managed: ManagedProcess

    def wait_ready(self, timeout: float = 120.0) -> None:
        began = time.monotonic()
        while READY_LINE not in self.managed.stdout_text() + self.managed.stderr_text():
            if not self.managed.running():
                pytest.fail(f"reef streams exited during start-up\n{self.managed.output()}")
            if time.monotonic() - began > timeout:
                pytest.fail(f"reef streams not ready in {timeout:.0f}s\n{self.managed.output()}")
            time.sleep(0.2)


def start_streams(log_flags: list[str], work_dir: Path) -> StreamsWorker:
    """``reef streams`` in its own working directory (its data dir is there)."""
    argv = [reef_executable(), "streams", *log_flags]
    work_dir.mkdir(parents=True, exist_ok=True)
    out, err = work_dir / "streams.stdout.log", work_dir / "streams.stderr.log"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            argv,
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            env=clean_env(WORKER_ENV),
            cwd=work_dir,
        )
    return StreamsWorker(ManagedProcess(argv, process, out, err))


def wait_inputs_committed(dep: Deployment, prefix: str, worker: StreamsWorker) -> None:
    """The worker's group has committed every input record (its changelogs are complete)."""
    from reef.catalog import processors
    from reef.settings import Settings

    group = topics.STREAMS_APP_ID  # the log prefixes groups like topics
    inputs = {t for p in processors(Settings.model_validate({})) for t in p.inputs}

    async def behind() -> dict[str, int]:
        log = dep.new_log()
        await log.start()
        try:
            out = {}
            for topic in sorted(inputs):
                ends = await log.end_offsets(topic)
                done = await log.committed(group, topic)
                lag = sum(end - done.get(p, 0) for p, end in ends.items())
                if lag:
                    out[topic] = lag
            return out
        finally:
            await log.close()

    deadline = time.monotonic() + 60
    while lagging := _run(behind()):
        assert worker.managed.running(), f"reef streams died\n{worker.managed.output()}"
        assert time.monotonic() < deadline, f"inputs not committed in time: {lagging}"
        time.sleep(0.5)


def derive_samples(dep: Deployment) -> list[Event]:
    """What the join emits when re-run over its inputs from the beginning."""

    async def run() -> list[Event]:
        log = dep.new_log()
        await log.start()
        try:
            store, join, state = EventStore(log), JoinProcessor(), DictState()
            out: list[Event] = []
            for record in await _all_records(log, join.inputs):
                stored = store.decode(record)
                if stored.event is not None:
                    out += join.step(state, stored.event)
            return out
        finally:
            await log.close()

    found: list[Event] = _run(run())
    return found


def positioned(dep: Deployment) -> dict[tuple[int, int], Event]:
    """reef.samples by position (Kafka interleaves partitions arbitrarily when reading)."""
    return {
        (s.record.partition, s.record.offset): s.event
        for s in dep.stored(topics.SAMPLES, raw=True)  # as the join wrote them
        if s.event is not None
    }


def per_scenario(events: list[Event]) -> dict[str, list[Event]]:
    """Events by scenario, in order (a scenario's events share one partition)."""
    out: dict[str, list[Event]] = {}
    for event in events:
        out.setdefault(event.scenario, []).append(event)
    return out


def status_digest(dep: Deployment) -> str:
    with dep.client(token=dep.read_token) as client:
        response = client.get("/reef/status")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["projection"]["healthy"] is True, body
    digest: str = body["projection"]["digest"]
    return digest


@pytest.mark.kafka
@pytest.mark.slow
def test_disaster_recovery_from_kafka_alone(
    kafka_bootstrap: str, upstream: UpstreamProcess, tmp_path: Path
) -> None:
    from reef.log.kafka import KafkaLog

    prefix = f"t-ops-dr-{uuid.uuid4().hex[:10]}-"
    log_flags = ["--log", "kafka", "--kafka-bootstrap", kafka_bootstrap]
    log_flags += ["--kafka-topic-prefix", prefix]
    created = run_reef("topics", "create", *log_flags)
    assert created.returncode == 0, f"reef topics create:\n{created.stdout}\n{created.stderr}"
    worker = start_streams(log_flags, tmp_path / "streams")
    admin, reader = f"adm-{secrets.token_hex(8)}", f"rd-{secrets.token_hex(8)}"
    env = deployment_env(admin, reader)
    state_1, state_2 = tmp_path / "state-1", tmp_path / "state-2"
    processes: list[ReefProcess] = []

    def serve(state_dir: Path) -> Deployment:
        process = start_reef(
            [*log_flags, "--upstream-url", upstream.v1_url], env=env, state_dir=state_dir
        )
        processes.append(process)
        return Deployment(
            name="kafka",
            process=process,
            admin_token=admin,
            read_token=reader,
            new_log=lambda: KafkaLog(
                kafka_bootstrap, topic_prefix=prefix, client_id="reef-ops-test"
            ),
            content=ContentStore(LocalArtifactStore.in_state_dir(state_dir)),
            log_flags=log_flags,
            decide_timeout=60.0,
        )

    try:
        first = serve(state_1)
        worker.wait_ready()
        history = run_workload(first, "dr")
        wait_inputs_committed(first, prefix, worker)

        heads = {s: first.releases(s) for s in (history.a, history.b)}
        fates = {rid: first.fate(s, rid) for rid, s in history.reports.items()}
        samples = positioned(first)
        digest = status_digest(first)
        assert heads[history.a][0]["release_id"] == history.rolled_back["release_id"]
        assert Counter(type(e).__name__ for e in samples.values()) == {
            "SampleJoined": 4,
            "ReportRejected": 3,
        }

        # the disaster: the server and everything it kept locally are gone
        first.process.stop()
        shutil.rmtree(state_1)
        assert not state_1.exists()

        replayed = run_reef("replay", "--compare-live", *log_flags)
        assert replayed.returncode == 0, f"{replayed.stdout}\n{replayed.stderr}"
        report = json.loads(replayed.stdout)
        assert report["equal"] is True, report
        assert set(report["live"]) == {"join", "chain"}
        assert report["replayed"]["api"] == digest
        assert report["events"] > 0

        # the samples topic is what the join derives from the inputs alone
        in_order = [samples[position] for position in sorted(samples)]
        assert per_scenario(derive_samples(first)) == per_scenario(in_order)

        second = serve(state_2)
        assert {s: second.releases(s) for s in heads} == heads
        assert {rid: second.fate(s, rid) for rid, s in history.reports.items()} == fates
        assert positioned(second) == samples
        assert status_digest(second) == digest
        wait_inputs_committed(second, prefix, worker)
        assert positioned(second) == samples, "the new server caused new samples"
        assert worker.managed.running(), worker.managed.output()
    finally:
        for process in processes:
            process.stop()
        worker.managed.stop(timeout=20)
        _run(delete_prefixed_topics(kafka_bootstrap, prefix))
