"""Harness releases installed into agents' folders through a running ``reef serve``.

One embedded server, the session's ``harness_server`` (shared with
tests/e2e/test_reef_client.py; releases are proposed as a trainer would,
tests/support/deployment.py). The install script is fetched from
``GET /reef/harness/install`` and run with ``sh`` in a temporary HOME, directly and
through ``reef harness install|status|uninstall``; the catalogue routes list the chain
oldest first with gate metrics; an inference pinned with ``x-reef-release-id`` is
recorded under that release; bad input answers in the right shape and writes nothing.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import httpx
import pytest
from reef_client import ReefClient
from reef_client.client import HARNESS_VERSION_SIDECAR

from reef.artifacts import LocalArtifactStore
from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.events import InferenceRecorded
from reef.harness import RECORD_FILE, InstallRecord, render_files
from reef.log.embedded import EmbeddedLog
from reef.testing.servers import run_reef
from tests.support.api import (
    assert_anthropic_error,
    assert_openai_error,
    assert_reef_error,
    chat_body,
    messages_body,
)
from tests.support.deployment import Deployment
from tests.support.harness_install import SEED, run_sh, tree_of
from tests.support.reef_server import ReefServer

V2 = {
    "system_prompt.md": "You are the trained agent.\n",
    "rules/style.md": "One line.\n",
    "commands/fix.md": "Fix it.\n",
    "config/agent.json": json.dumps({"model": "big"}),
}


@pytest.fixture(scope="module")
def deployment(harness_server: ReefServer) -> Deployment:
    state_dir, token = harness_server.state_dir, harness_server.token
    assert token is not None
    return Deployment(
        name="embedded",
        process=harness_server.process,
        admin_token=token,
        read_token=token,
        content=ContentStore(LocalArtifactStore.in_state_dir(state_dir)),
        new_log=lambda: EmbeddedLog(state_dir / "log.sqlite3"),
    )


@pytest.fixture(scope="module")
def chain(deployment: Deployment) -> dict[str, Any]:
    """A scenario with two releases: the seed (creation) and a trained one (the head)."""
    scenario = deployment.create_scenario("install")
    creation = deployment.head(scenario)
    trained = deployment.propose_training(scenario, deployment.content.publish_files({**V2}))
    return {"scenario": scenario, "v1": creation["release_id"], "v2": trained["release_id"]}


def fetch_script(
    deployment: Deployment, scenario: str, adapter: str, **params: str
) -> httpx.Response:
    with deployment.client(scenario=scenario) as client:
        return client.get("/reef/harness/install", params={"adapter": adapter, **params})


def reef_harness(
    deployment: Deployment, *args: str, home: Path
) -> subprocess.CompletedProcess[str]:
    env = {"REEF_TOKEN": deployment.admin_token, "HOME": str(home)}
    return run_reef("harness", *args, "--url", deployment.base_url, env=env)


@pytest.mark.parametrize("adapter", ["claude", "codex", "generic"])
def test_the_served_script_installs_upgrades_and_pins(
    deployment: Deployment, chain: dict[str, Any], adapter: str, tmp_path: Path
) -> None:
    scenario, dest = chain["scenario"], tmp_path / "agent"
    old = fetch_script(deployment, scenario, adapter, release_id=chain["v1"])
    head = fetch_script(deployment, scenario, adapter)
    assert old.status_code == head.status_code == 200, (old.text, head.text)
    assert head.headers["content-type"].startswith("text/x-shellscript")
    assert head.headers["x-reef-release-id"] == chain["v2"]
    assert deployment.admin_token not in head.text  # no token inside

    assert run_sh(old.text, dest, tmp_path).returncode == 0
    assert tree_of(dest) == render_files(SEED, adapter)
    upgraded = run_sh(head.text, dest, tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    assert tree_of(dest) == render_files(V2, adapter)  # the seed's skill is pruned
    assert "already current" in run_sh(head.text, dest, tmp_path).stdout
    record = InstallRecord.parse((dest / RECORD_FILE).read_text())
    assert (record.release_id, record.scenario, record.adapter) == (chain["v2"], scenario, adapter)


def test_the_cli_installs_reports_status_and_uninstalls(
    deployment: Deployment, chain: dict[str, Any], tmp_path: Path
) -> None:
    scenario, dest = chain["scenario"], tmp_path / ".claude"
    flags = ["--adapter", "claude", "--scenario", scenario]
    pinned = reef_harness(
        deployment, "install", *flags, "--release", chain["v1"], str(dest), home=tmp_path
    )
    assert pinned.returncode == 0, pinned.stderr
    assert tree_of(dest) == render_files(SEED, "claude")

    behind = reef_harness(deployment, "status", *flags, str(dest), home=tmp_path)
    assert behind.returncode == 0, behind.stderr
    assert f"behind: the head is release {chain['v2']}" in behind.stdout
    update = f"update with: reef harness install --adapter claude --scenario {scenario}"
    assert update in behind.stdout

    updated = reef_harness(deployment, "install", *flags, str(dest), home=tmp_path)
    assert updated.returncode == 0, updated.stderr
    assert tree_of(dest) == render_files(V2, "claude")
    current = reef_harness(deployment, "status", *flags, str(dest), home=tmp_path)
    assert "current: the installed release is the head" in current.stdout

    (dest / "CLAUDE.md").write_text("edited by hand\n")
    tampered = reef_harness(deployment, "status", *flags, str(dest), home=tmp_path)
    assert "changed since installed: CLAUDE.md" in tampered.stdout
    refused = reef_harness(deployment, "uninstall", *flags, str(dest), home=tmp_path)
    assert refused.returncode == 1 and "CLAUDE.md" in refused.stderr
    assert (dest / "CLAUDE.md").exists()
    gone = reef_harness(deployment, "uninstall", *flags, "--force", str(dest), home=tmp_path)
    assert gone.returncode == 0, gone.stderr
    assert not dest.exists()


def test_the_catalogue_lists_releases_oldest_first(
    deployment: Deployment, chain: dict[str, Any]
) -> None:
    with deployment.client(scenario=chain["scenario"]) as client:
        releases = client.get("/reef/harness/releases").json()
        versions = client.get("/reef/harness/versions").json()["versions"]
        pinned = client.get("/reef/harness", params={"version": chain["v1"]})
    assert [r["release_id"] for r in releases["releases"]] == [chain["v1"], chain["v2"]]
    assert releases["head"] == chain["v2"]
    assert [r["step"] for r in releases["releases"]] == [0, 1]
    assert releases["releases"][1]["metrics"] == {"reward": 0.5}  # the step's gate metrics
    assert [v["artifact_version"] for v in versions] == [chain["v1"], chain["v2"]]
    assert pinned.status_code == 200, pinned.text
    assert pinned.json()["artifact_version"] == pinned.json()["release_id"] == chain["v1"]
    assert pinned.json()["files"] == SEED
    assert pinned.headers["x-reef-artifact-version"] == chain["v1"]


def test_an_inference_pinned_to_a_release_is_recorded_under_it(
    deployment: Deployment, chain: dict[str, Any]
) -> None:
    scenario = chain["scenario"]
    with deployment.client(scenario=scenario) as client:
        pinned = client.post(
            "/v1/chat/completions",
            json=chat_body("pinned"),
            headers={"x-reef-release-id": chain["v1"]},
        )
        head = client.post("/v1/chat/completions", json=chat_body("head"))
    assert pinned.status_code == head.status_code == 200, (pinned.text, head.text)
    assert pinned.headers["x-reef-release-id"] == chain["v1"]
    assert head.headers["x-reef-release-id"] == chain["v2"]
    recorded = {
        e.event_id: e.release_id
        for e in deployment.events(topics.INFERENCE)
        if isinstance(e, InferenceRecorded)
    }
    assert recorded[pinned.headers["x-reef-agent-record-id"]] == chain["v1"]
    assert recorded[head.headers["x-reef-agent-record-id"]] == chain["v2"]


def test_an_unknown_or_foreign_pin_is_a_409_in_the_dialects_shape(
    deployment: Deployment, chain: dict[str, Any]
) -> None:
    other = deployment.create_scenario("install-other")
    foreign = chain["v2"]
    never = f"never-{secrets.token_hex(4)}"
    before = len(deployment.events(topics.INFERENCE))
    with deployment.client(scenario=other) as client:
        openai = client.post(
            "/v1/chat/completions", json=chat_body("x"), headers={"x-reef-release-id": foreign}
        )
        anthropic = client.post(
            "/v1/messages", json=messages_body("x"), headers={"x-reef-release-id": "0" * 32}
        )
    with deployment.client(scenario=never) as client:
        unborn = client.post(
            "/v1/chat/completions", json=chat_body("x"), headers={"x-reef-release-id": foreign}
        )
    assert assert_openai_error(openai, 409)["error"]["code"] == "unknown_release"
    assert_anthropic_error(anthropic, 409)
    assert_openai_error(unborn, 409)
    assert len(deployment.events(topics.INFERENCE)) == before  # nothing recorded
    with deployment.client() as client:
        names = [s["scenario"] for s in client.get("/reef/scenarios").json()["scenarios"]]
    assert never not in names  # and no scenario created


def test_bad_install_requests_answer_clearly_and_write_nothing(
    deployment: Deployment, tmp_path: Path
) -> None:
    scenario = deployment.create_scenario("install-bad")
    coded: dict[str, bytes | str] = {"extensions/guard.ts": "export {}\n", **SEED}
    deployment.propose_training(scenario, deployment.content.publish_files(coded))
    error = assert_reef_error(fetch_script(deployment, scenario, "pi"), 404)["error"]
    assert error["code"] == "unknown_adapter" and "claude, codex, generic" in error["message"]
    refused = assert_reef_error(fetch_script(deployment, scenario, "codex"), 409)["error"]
    assert refused["code"] == "adapter_refused_kind" and "extensions/guard.ts" in refused["message"]
    plain = fetch_script(deployment, scenario, "generic")  # a plain folder takes any kind
    assert plain.status_code == 200, plain.text
    with deployment.client(scenario=scenario) as client:
        assert_reef_error(client.get("/reef/harness/install"), 400)  # no adapter
        conflicting = client.get(
            "/reef/harness/install", params={"adapter": "claude", "release_id": "a", "version": "b"}
        )
        assert_reef_error(conflicting, 400)
        unknown = {"adapter": "claude", "release_id": "0" * 32}
        assert_reef_error(client.get("/reef/harness/install", params=unknown), 404)

    dest = tmp_path / "codex-home"
    flags = ["--adapter", "codex", "--scenario", scenario, str(dest)]
    failed = reef_harness(deployment, "install", *flags, home=tmp_path)
    assert failed.returncode == 1 and "adapter_refused_kind" in failed.stderr
    assert not dest.exists()


def test_reef_client_pulls_latest_and_pinned_and_removes_stale_files(
    deployment: Deployment, chain: dict[str, Any], tmp_path: Path
) -> None:
    """The published client across two releases (its four calls on both logs:
    tests/e2e/test_reef_client.py)."""
    client = ReefClient(deployment.base_url, token=deployment.admin_token)
    scenario, dest = chain["scenario"], tmp_path / "pulled"
    versions = client.harness_versions(scenario)
    assert [v["artifact_version"] for v in versions] == [chain["v1"], chain["v2"]]
    assert versions[1]["metrics"] == {"reward": 0.5}

    assert client.harness_pull(scenario, dest, version=chain["v1"]) == chain["v1"]
    assert tree_of(dest) == {**SEED, HARNESS_VERSION_SIDECAR: ANY}
    assert client.harness_pull(scenario, dest) == chain["v2"]
    assert tree_of(dest) == {**V2, HARNESS_VERSION_SIDECAR: ANY}  # the seed's skill is gone
    assert client.harness_pull(scenario, dest, version=chain["v1"]) == chain["v1"]
    assert tree_of(dest) == {**SEED, HARNESS_VERSION_SIDECAR: ANY}  # and V2's files
