"""Operator tooling end to end: ``reef audit verify`` and ``reef audit trail``.

One embedded ``reef serve`` (module-scoped) gets the mixed history of
:func:`tests.support.operations.run_workload` once. On it:

* ``reef audit verify`` is OK on the clean history; on copies of the state dir it names a
  release event tampered in place, a forged commit, a deleted or corrupted artifact
  object, a deleted manifest and a sample whose references are not recorded exchanges of
  its scenario, and exits 1;
* ``reef audit trail`` follows a receipt to its reports, sample, the release that trained
  on it and an engine that loaded that release.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import sqlite3
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from reef.artifacts import LocalArtifactStore
from reef.codec import EventCodec
from reef.core import topics
from reef.core.events import EngineLoaded, Event, ReleaseCommitted, SampleJoined, utc_now
from reef.core.ids import EMPTY_CONTENT_ID, new_receipt, release_id
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.testing.servers import run_reef
from tests.support.deployment import Deployment
from tests.support.operations import History


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---------------------------------------------------------------------------
# The embedded deployment and its history (one per module)


@pytest.fixture(scope="module")
def embedded(operations_deployment: Deployment) -> Deployment:
    return operations_deployment


@pytest.fixture(scope="module")
def history(operations_history: History) -> History:
    return operations_history


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
