"""The published ``reef-client`` (PyPI, stdlib only) against ``reef serve`` on both logs.

Its four calls from the seed quickstart, as a user writes them: ``inference_with_record``
(the receipt from the response header), ``report`` quoting it, ``harness_versions``
(``GET /reef/harness/versions`` → ``versions``) and ``harness_pull`` (``GET /reef/harness``
→ ``files`` and ``artifact_version``; pinned with ``?version=``). Pulls across two
releases, with stale files removed, run against the chain of
tests/e2e/test_harness_install.py (the embedded log's chain runs inside ``reef serve``).
On the embedded log the module uses the session's ``harness_server`` (shared with
tests/e2e/test_harness_install.py); on Kafka a server of its own, with the same seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import ANY

import pytest
from reef_client import ReefClient, ReefClientError
from reef_client.client import HARNESS_VERSION_SIDECAR

from reef.core.events import ReportSubmitted
from reef.core.topics import REPORTS
from tests.support.api import chat_body, unique_scenario
from tests.support.harness_install import SEED, tree_of, write_tree
from tests.support.reef_server import ReefServer


@pytest.fixture(scope="module")
def reef_server(
    request: pytest.FixtureRequest, log_kind: str, tmp_path_factory: pytest.TempPathFactory
) -> ReefServer:
    if log_kind == "embedded":
        shared: ReefServer = request.getfixturevalue("harness_server")
        return shared
    seed = write_tree(tmp_path_factory.mktemp("client-seed"), SEED)
    started: ReefServer = request.getfixturevalue("reef_factory")(env={"REEF_SEED_DIR": str(seed)})
    return started


def client_of(server: ReefServer) -> ReefClient:
    return ReefClient(server.base_url, token=server.token)


def test_inference_with_record_and_report(reef_server: ReefServer) -> None:
    client, scenario = client_of(reef_server), unique_scenario("client")
    body, receipt = client.inference_with_record(
        scenario, "/v1/chat/completions", chat_body("Return exactly: reef is ready")
    )
    assert body["choices"][0]["message"]["content"] == "reef is ready"
    (recorded,) = reef_server.inference(scenario)
    assert recorded.event_id == receipt

    answer = client.report(scenario, {"score": 1.0, "feedback": "matched"}, references=[receipt])
    assert answer["scenario"] == scenario and answer["request_type"] == "report"
    (report,) = reef_server.wait_for(REPORTS, scenario)
    assert isinstance(report, ReportSubmitted)
    assert report.event_id == answer["agent_record_id"] and report.references == [receipt]


def test_an_inference_pinned_by_artifact_version_is_recorded_under_it(
    reef_server: ReefServer,
) -> None:
    client, scenario = client_of(reef_server), unique_scenario("client-pin")
    client.inference_with_record(scenario, "/v1/chat/completions", chat_body("first"))
    (creation,) = client.harness_versions(scenario)
    _, receipt = client.inference_with_record(
        scenario,
        "/v1/chat/completions",
        chat_body("pinned"),
        artifact_version=creation["artifact_version"],
    )
    recorded = {e.event_id: e.release_id for e in reef_server.inference(scenario)}
    assert recorded[receipt] == creation["artifact_version"]
    with pytest.raises(ReefClientError) as refused:
        client.inference(
            scenario, "/v1/chat/completions", chat_body("x"), artifact_version="0" * 32
        )
    assert refused.value.status == 409
    assert json.loads(refused.value.body)["error"]["code"] == "unknown_release"


def test_harness_versions_and_pull(reef_server: ReefServer, tmp_path: Path) -> None:
    client, scenario = client_of(reef_server), unique_scenario("client-harness")
    client.inference_with_record(scenario, "/v1/chat/completions", chat_body("create"))
    versions = client.harness_versions(scenario)
    assert [v["operation"] for v in versions] == ["creation"]
    version = versions[0]["artifact_version"]

    latest = client.harness_pull(scenario, tmp_path / "latest")
    pinned = client.harness_pull(scenario, tmp_path / "pinned", version=version)
    assert latest == pinned == version
    for dest in (tmp_path / "latest", tmp_path / "pinned"):
        assert tree_of(dest) == {**SEED, HARNESS_VERSION_SIDECAR: ANY}
        sidecar = json.loads((dest / HARNESS_VERSION_SIDECAR).read_text())
        assert sidecar == {"artifact_version": version, "files": sorted(SEED)}

    with pytest.raises(ReefClientError) as unknown:
        client.harness_pull(scenario, tmp_path / "none", version="0" * 32)
    assert unknown.value.status == 404
