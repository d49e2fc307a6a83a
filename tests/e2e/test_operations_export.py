"""Operator tooling end to end: ``reef export``, ``/metrics`` and ``reef status``.

One embedded ``reef serve`` (module-scoped) gets the mixed history of
:func:`tests.support.operations.run_workload` once. On it:

* ``reef export`` to Parquet and JSONL holds exactly the topic's events (envelope, type,
  position, fields); ``--since`` filters (also given as ISO 8601 with an offset);
* ``/metrics`` has a non-zero value in every family; ``reef status`` renders.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reef.core import topics
from reef.core.events import EngineLoaded, ReportRejected, SampleJoined, utc_now
from reef.services.eventstore import StoredEvent
from reef.testing.servers import run_reef
from tests.support.deployment import Deployment
from tests.support.operations import History

#: topics the mixed history may leave empty: engine loads (no engine here), turns and
#: judgements (sessions are not tracked in this deployment; tests/api/test_sessions.py
#: and tests/e2e/test_judge.py cover them)
UNEXERCISED_TOPICS = frozenset({topics.ENGINE, topics.TURNS, topics.JUDGEMENTS})

# ---------------------------------------------------------------------------
# The embedded deployment and its history (one per module)


@pytest.fixture(scope="module")
def embedded(operations_deployment: Deployment) -> Deployment:
    return operations_deployment


@pytest.fixture(scope="module")
def history(operations_history: History) -> History:
    return operations_history


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
        if topic in UNEXERCISED_TOPICS and not stored:
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
