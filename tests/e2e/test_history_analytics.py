"""``reef.history`` and the worked analytics example (docs/analytics.py) against a real
deployment, on the embedded log and on Kafka (``reef serve`` + ``reef streams``).

A small history: two exchanges on the creation release (one claim-checked), reports with
every cheap fate (consumed by a training release, accepted, rejected as
``already_consumed`` and ``no_references``), two exchanges on the trained release and a
report on both, then one of those two erased. Then:

* the library opens sealed bodies (the claim-checked one from the artifact store) and
  gives the erased exchange, and the sample containing it, back marked ``erased``;
* ``python docs/analytics.py`` (a subprocess configured by ``REEF_*`` like any Reef
  process) computes tokens per release, score per release and report fates, which match
  the events and the API's ``GET /reef/reports/{id}``;
* the same example over ``reef export`` Parquet files agrees, less the erased exchange
  (an export leaves it out).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from reef.cli.export import export as export_command
from reef.core import topics
from reef.core.events import InferenceRecorded, SampleJoined
from reef.history import read_tables
from reef.settings import Settings
from reef.testing.servers import UpstreamProcess, clean_env
from tests.support.deployment import Deployment
from tests.support.operations import embedded_deployment, kafka_deployment

ROOT = Path(__file__).resolve().parents[2]
TOPICS = (topics.INFERENCE, topics.REPORTS, topics.SAMPLES, topics.RELEASES)
#: a request over this size is claim-checked into the artifact store
ENV = {"REEF_CLAIM_CHECK_BYTES": "1024"}


@pytest.fixture(scope="module", params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def deployment(
    request: pytest.FixtureRequest,
    upstream: UpstreamProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    work = tmp_path_factory.mktemp(f"analytics-{request.param}")
    if request.param == "embedded":
        with embedded_deployment(upstream, work / "state", ENV) as dep:
            yield dep
        return
    bootstrap: str = request.getfixturevalue("kafka_bootstrap")
    with kafka_deployment(upstream, bootstrap, work, ENV) as dep:
        yield dep


def settings_of(dep: Deployment) -> dict[str, str]:
    """The deployment's log and state dir as settings (from its CLI flags)."""
    flags = dep.log_flags
    return {
        flags[i].removeprefix("--").replace("-", "_"): flags[i + 1] for i in range(0, len(flags), 2)
    }


@dataclass
class History:
    scenario: str
    creation: str
    trained: str
    receipts: list[str]  #: two on the creation release, then two on the trained one
    erased: str
    marker: str  #: in the claim-checked request
    reports: dict[str, str]  #: report id -> scenario


@pytest.fixture(scope="module")
def history(deployment: Deployment) -> History:
    dep = deployment
    scenario = dep.create_scenario("analytics")
    creation = dep.head(scenario)["release_id"]
    marker = f"claim-checked-{scenario}"
    first = [dep.infer(scenario, "small question"), dep.infer(scenario, marker + " x" * 800)]
    reports = {
        dep.report(scenario, [first[0]], score=1.0): scenario,
        dep.report(scenario, [first[1]], score=0.0): scenario,
    }
    reports[dep.report(scenario, [first[0]], score=0.5)] = scenario  # already_consumed
    reports[dep.report(scenario, [], score=0.5)] = scenario  # no_references
    dep.wait_fates(reports)
    consumed = next(iter(reports))
    (sample,) = [
        e.event_id
        for e in dep.events(topics.SAMPLES)
        if isinstance(e, SampleJoined) and e.report_id == consumed
    ]
    content = dep.content.publish_files({"system_prompt.md": b"You are trained.\n"})
    trained = dep.propose_training(scenario, content, [sample])["release_id"]
    later = [dep.infer(scenario, "after training"), dep.infer(scenario, "to be erased")]
    reports[dep.report(scenario, later, score=0.5)] = scenario
    dep.wait_fates(reports)
    with dep.client() as client:
        erased = client.delete(f"/reef/scenarios/{scenario}/records/{later[1]}")
    assert erased.status_code == 200, erased.text
    return History(scenario, creation, trained, [*first, *later], later[1], marker, reports)


def test_the_library_opens_bodies_and_marks_the_erased(
    deployment: Deployment, history: History
) -> None:
    settings = Settings.from_flat(settings_of(deployment))
    tables = asyncio.run(read_tables(settings, TOPICS, scenario=history.scenario))
    exchanges = {
        r["event_id"]: r
        for r in tables[topics.INFERENCE].to_pylist()
        if r["type"] == "InferenceRecorded"
    }
    assert list(exchanges) == history.receipts
    erased = exchanges.pop(history.erased)
    assert erased["erased"] is True and erased["request_json"] is None
    assert erased["response_json"] is None and erased["input_tokens"] is not None
    assert all(not r["erased"] and r["request_json"] for r in exchanges.values())
    large = json.loads(exchanges[history.receipts[1]]["request_json"])
    assert large["messages"][0]["content"].startswith(history.marker)  # from the store
    assert exchanges[history.receipts[1]]["request_ref"] is None

    samples = [r for r in tables[topics.SAMPLES].to_pylist() if r["type"] == "SampleJoined"]
    (spanning,) = [r for r in samples if history.erased in r["references"]]
    assert spanning["erased"] is True
    turns = {t["receipt"]: t for t in json.loads(spanning["trajectory_json"])}
    assert turns[history.erased]["erased"] is True and turns[history.erased]["request"] is None
    kept = turns[history.receipts[2]]["request"]
    assert kept["messages"][0]["content"] == "after training"
    assert not any(r["erased"] for r in samples if r is not spanning)


def run_analytics(dep: Deployment, *args: str) -> str:
    """``python docs/analytics.py <args>`` configured for ``dep`` by REEF_* variables."""
    env = clean_env({f"REEF_{k.upper()}": v for k, v in settings_of(dep).items()})
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "analytics.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def analytics(dep: Deployment, *args: str) -> dict[str, list[dict[str, Any]]]:
    result: dict[str, list[dict[str, Any]]] = json.loads(run_analytics(dep, "--json", *args))
    return result


@pytest.fixture(scope="module")
def live(deployment: Deployment, history: History) -> dict[str, list[dict[str, Any]]]:
    """The example's results over ``reef.history`` (read once per deployment)."""
    return analytics(deployment, "--scenario", history.scenario)


def test_the_analytics_example_matches_the_events_and_the_api(
    deployment: Deployment, history: History, live: dict[str, list[dict[str, Any]]]
) -> None:
    result = live
    exchanges = [
        e
        for e in deployment.events(topics.INFERENCE)
        if isinstance(e, InferenceRecorded) and e.scenario == history.scenario
    ]
    expected: list[dict[str, Any]] = []
    for release in (history.creation, history.trained):
        served = [e for e in exchanges if e.release_id == release]
        expected.append(
            {
                "scenario": history.scenario,
                "release": release,
                "exchanges": 2,
                "input_tokens": sum(e.input_tokens or 0 for e in served),
                "output_tokens": sum(e.output_tokens or 0 for e in served),
                "erased": int(release == history.trained),
            }
        )
    assert result["tokens per release"] == expected
    assert all(row["input_tokens"] > 0 for row in expected)

    scores = {r["release"]: (r["samples"], r["mean_score"]) for r in result["score per release"]}
    assert scores == {history.creation: (2, 0.5), history.trained: (1, 0.5)}

    fates = {r["report_id"]: r for r in result["reports"]}
    assert set(fates) == set(history.reports)
    for report_id, scenario in history.reports.items():
        api = deployment.fate(scenario, report_id)
        ours = fates[report_id]
        assert (ours["status"], ours["reason"], ours["consumed_by"]) == (
            api["status"],
            api["reason"],
            api["release_id"],
        ), report_id
    counts = {(r["status"], r["reason"]): r["reports"] for r in result["report fates"]}
    assert counts == {
        ("consumed", None): 1,
        ("accepted", None): 2,
        ("rejected", "already_consumed"): 1,
        ("rejected", "no_references"): 1,
    }


def test_the_analytics_example_over_reef_export(
    deployment: Deployment,
    history: History,
    live: dict[str, list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    for topic in TOPICS:  # the command of `reef export`, in this process (no start-up)
        output = tmp_path / f"{topic}.parquet"
        args = ["--topic", topic, "--format", "parquet", "-o", str(output), *deployment.log_flags]
        done = CliRunner().invoke(export_command, args, catch_exceptions=False)
        assert done.exit_code == 0, done.output
        assert f"written to {output}" in done.output
    exported = analytics(deployment, "--exports", str(tmp_path), "--scenario", history.scenario)
    assert exported["reports"] == live["reports"]
    assert exported["score per release"] == live["score per release"]
    # the erased exchange is absent from an export: one exchange fewer, none marked
    (creation, trained) = exported["tokens per release"]
    assert creation == live["tokens per release"][0]
    assert trained["exchanges"] == 1 and trained["erased"] == 0

    # as a person reads it: text tables
    text = run_analytics(deployment, "--exports", str(tmp_path), "--scenario", history.scenario)
    for title in ("tokens per release", "score per release", "report fates", "reports"):
        assert f"== {title}\n" in text
    assert history.trained in text and "already_consumed" in text


def test_the_documented_consumer_reads_through_the_library(
    deployment: Deployment, history: History
) -> None:
    env = clean_env({f"REEF_{k.upper()}": v for k, v in settings_of(deployment).items()})
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "consumer.py"), "--topic", topics.INFERENCE],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    mine = {x["event"]["event_id"]: x for x in lines if x["event"]["scenario"] == history.scenario}
    assert mine[history.erased]["erased"] is True
    assert mine[history.erased]["event"]["request_json"] is None
    opened = mine[history.receipts[2]]
    assert opened["erased"] is False and "after training" in opened["event"]["request_json"]
