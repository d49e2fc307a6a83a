"""Canary rollouts end to end, on both logs: ``reef serve`` with ``REEF_ROLLOUTS`` (on
Kafka a ``reef streams`` worker hosts the controller beside the chain), the scripted
upstream, pending harness releases proposed as a trainer would.

* the admin routes refuse what the fold would refuse, in Reef's error shape;
* every exchange is routed by ``reef.core.routing.route`` over the rollout (the header
  names the arm; a session keeps its arm; on Kafka a second API replica routes alike);
* a candidate whose reports score better is promoted by the controller and becomes the
  head through the chain's promote; a worse one is rolled back and stays held, marked;
* an operator's promote or rollback ends a rollout at once;
* an agent fetching its harness with a session tag gets the harness of its session's
  arm (the one its exchanges are routed to); without a tag, the head's;
* a candidate slower than the policy's latency objective more often than the head is
  rolled back for latency;
* a rollout with no traffic is rolled back once its max_duration_s has passed (the
  API's deadline watcher, reef/api/rollout_deadlines.py);
* ``reef replay --compare-live`` finds the controller's live state equal to the replay.

The server (and worker) are started once per log for this module and the other rollout
module (``rollouts_dep``, tests/e2e/conftest.py).
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.core.events import RolloutDecided
from reef.core.routing import draw, routing_key, takes
from reef.testing.servers import UpstreamProcess, run_reef, start_reef
from tests.support.api import assert_reef_error, chat_body
from tests.support.deployment import Deployment

ENV = {"REEF_ROLLOUTS": "true"}
#: small enough for a test: a clear difference decides within ~100 exchanges
POLICY = {"share": 0.2, "min_exchanges": 8, "max_duration_s": 3600.0}
MAX_EXCHANGES = 600


def _env(admin: str, reader: str) -> dict[str, str]:
    return {
        **ENV,
        "REEF_TOKEN": admin,
        "REEF_TOKENS": f"{reader}:read",
        "REEF_UPSTREAM_API_KEY": f"sk-up-{secrets.token_hex(4)}",
    }


@pytest.fixture
def dep(rollouts_dep: Deployment) -> Deployment:
    """The package's rollouts deployment of this test's log (tests/e2e/conftest.py)."""
    return rollouts_dep


# ---------------------------------------------------------------------------
# Helpers


def held_release(dep: Deployment, scenario: str, text: str) -> str:
    content = dep.content.publish_files({"system_prompt.md": text})
    release: str = dep.propose_training(scenario, content, pending=True)["release_id"]
    return release


def start(dep: Deployment, scenario: str, release: str, **policy: Any) -> httpx.Response:
    with dep.client() as client:
        return client.post(
            f"/reef/scenarios/{scenario}/rollouts",
            json={"release_id": release, **POLICY, **policy},
        )


def rollout_of(dep: Deployment, scenario: str, rollout_id: str) -> dict[str, Any]:
    with dep.client(dep.read_token) as client:
        response = client.get(f"/reef/scenarios/{scenario}/rollouts")
    assert response.status_code == 200, response.text
    (found,) = [r for r in response.json()["rollouts"] if r["rollout_id"] == rollout_id]
    return found  # type: ignore[no-any-return]


def served(
    dep: Deployment, scenario: str, session: str, base_url: str | None = None
) -> tuple[str, str]:
    """One tagged exchange: (its receipt, the release header)."""
    headers = {"Authorization": f"Bearer {dep.admin_token}", "x-reef-scenario": scenario}
    headers["x-reef-tag-session"] = session
    with httpx.Client(base_url=base_url or dep.base_url, headers=headers, timeout=60) as client:
        response = client.post("/v1/chat/completions", json=chat_body(f"hello {session}"))
    assert response.status_code == 200, response.text
    return response.headers["x-reef-agent-record-id"], response.headers["x-reef-release-id"]


def exchange_and_report(
    dep: Deployment, scenario: str, session: str, score_of: Callable[[str], float]
) -> str:
    receipt, release = served(dep, scenario, session)
    dep.report(scenario, [receipt], score_of(release))
    return release


def drive(
    dep: Deployment,
    scenario: str,
    rollout_id: str,
    score_of: Callable[[str], float],
) -> tuple[dict[str, Any], dict[str, str]]:
    """Sessions, each one exchange reported with ``score_of(release)``, until the rollout
    ends; the rollout as listed, and the release each session was served by."""
    arms: dict[str, str] = {}
    with ThreadPoolExecutor(4) as pool:
        while len(arms) < MAX_EXCHANGES:
            sessions = [f"s-{uuid.uuid4().hex[:12]}" for _ in range(16)]
            releases = pool.map(lambda s: exchange_and_report(dep, scenario, s, score_of), sessions)
            arms.update(zip(sessions, releases, strict=True))
            rollout = rollout_of(dep, scenario, rollout_id)
            if rollout["status"] != "active":
                return rollout, arms
            dep.alive()
    raise AssertionError(f"no decision after {len(arms)} exchanges: {rollout}")


def expected_arm(scenario: str, started: dict[str, Any], session: str) -> str:
    chosen = takes(
        started["share"], draw(scenario, started["rollout_id"], routing_key(session, ""))
    )
    arm: str = started["candidate_release_id"] if chosen else started["head_release_id"]
    return arm


def wait_head(
    dep: Deployment, scenario: str, wanted: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    deadline = time.monotonic() + dep.decide_timeout
    while not wanted(head := dep.head(scenario)):
        assert time.monotonic() < deadline, f"head not as wanted: {head}"
        time.sleep(0.2)
    return head


# ---------------------------------------------------------------------------
# Tests


def test_a_start_is_refused_as_the_fold_would_refuse_it(dep: Deployment) -> None:
    scenario = dep.create_scenario("canary-refused")
    head = dep.head(scenario)["release_id"]
    held = held_release(dep, scenario, "held")

    assert assert_reef_error(start(dep, scenario, head), 409)["error"]["code"] == "not_pending"
    unknown = assert_reef_error(start(dep, scenario, "f" * 32), 404)
    assert unknown["error"]["code"] == "unknown_release"
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"share": 1.0}, "invalid_policy"),
        ({"share": "half"}, "invalid_share"),
        ({"min_exchanges": 0}, "invalid_policy"),
        ({"mode": "blue-green"}, "invalid_policy"),
    ]
    for bad, code in refusals:
        assert assert_reef_error(start(dep, scenario, held, **bad), 400)["error"]["code"] == code
    with dep.client(dep.read_token) as client:
        forbidden = client.post(f"/reef/scenarios/{scenario}/rollouts", json={"release_id": held})
    assert_reef_error(forbidden, 403)

    first = start(dep, scenario, held)
    assert first.status_code == 201, first.text
    body = first.json()
    assert (body["status"], body["mode"], body["share"]) == ("active", "canary", 0.2)
    assert (body["candidate_release_id"], body["head_release_id"]) == (held, head)
    again = assert_reef_error(start(dep, scenario, held), 409)
    assert again["error"]["code"] == "rollout_active"
    with dep.client() as client:
        missing = client.post(f"/reef/scenarios/{scenario}/rollouts/{'0' * 32}/rollback")
    assert assert_reef_error(missing, 404)["error"]["code"] == "unknown_rollout"


def test_a_better_candidate_is_promoted_and_becomes_the_head(dep: Deployment) -> None:
    scenario = dep.create_scenario("canary-better")
    head = dep.head(scenario)["release_id"]
    candidate = held_release(dep, scenario, "better")
    response = start(dep, scenario, candidate)
    assert response.status_code == 201, response.text
    started = response.json()

    rollout, arms = drive(dep, scenario, started["rollout_id"], lambda r: float(r == candidate))
    assert (rollout["status"], rollout["reason"]) == ("promoted", "statistic"), rollout
    figures = rollout["figures"]
    assert figures["p_better"] <= started["alpha"]
    assert figures["candidate"]["mean_score"] == 1.0 and figures["head"]["mean_score"] == 0.0
    promoted = wait_head(dep, scenario, lambda h: h["operation"] == "promote")
    assert promoted["rollback_target_release_id"] == candidate
    assert promoted["parent_release_id"] == head
    assert promoted["metrics"]["rollout_id"] == started["rollout_id"]
    (held,) = [r for r in dep.releases(scenario) if r["release_id"] == candidate]
    assert held["pending"] is False
    # routing: each session drew its arm from (scenario, rollout, session) alone, until
    # the decision reached the API (then the candidate served all) and the chain committed
    # the promote (then its new head)
    expected = {s: expected_arm(scenario, started, s) for s in arms}
    assert set(arms.values()) <= {head, candidate, promoted["release_id"]}
    moved = [s for s in arms if arms[s] != expected[s]]
    assert len(moved) <= 32, (len(moved), len(arms))  # at most the last two rounds
    share = sum(expected[s] == candidate for s in arms) / len(arms)
    assert 0.05 < share < 0.5, share
    # every session now goes to the new head
    assert {served(dep, scenario, f"after-{n}")[1] for n in range(6)} == {promoted["release_id"]}


def test_a_worse_candidate_is_rolled_back_and_stays_held(dep: Deployment) -> None:
    scenario = dep.create_scenario("canary-worse")
    head = dep.head(scenario)["release_id"]
    candidate = held_release(dep, scenario, "worse")
    started = start(dep, scenario, candidate).json()

    rollout, _ = drive(dep, scenario, started["rollout_id"], lambda r: float(r != candidate))
    assert (rollout["status"], rollout["reason"]) == ("rolled_back", "statistic"), rollout
    assert rollout["figures"]["p_worse"] <= started["alpha"]
    assert dep.head(scenario)["release_id"] == head
    (held,) = [r for r in dep.releases(scenario) if r["release_id"] == candidate]
    assert held["pending"] is True
    assert {served(dep, scenario, f"after-{n}")[1] for n in range(6)} == {head}
    again = assert_reef_error(start(dep, scenario, candidate), 409)
    assert again["error"]["code"] == "candidate_rolled_back"


def test_an_operator_ends_a_rollout_at_once(dep: Deployment) -> None:
    scenario = dep.create_scenario("canary-manual")
    head = dep.head(scenario)["release_id"]
    first = held_release(dep, scenario, "first")
    second = held_release(dep, scenario, "second")

    rollout_id = start(dep, scenario, first).json()["rollout_id"]
    with dep.client() as client:
        rolled = client.post(f"/reef/scenarios/{scenario}/rollouts/{rollout_id}/rollback")
        assert rolled.status_code == 200, rolled.text
        assert (rolled.json()["rollout"]["status"], rolled.json()["rollout"]["reason"]) == (
            "rolled_back",
            "manual",
        )
        retried = client.post(f"/reef/scenarios/{scenario}/rollouts/{rollout_id}/rollback")
        assert retried.status_code == 200, retried.text
        promote_ended = client.post(f"/reef/scenarios/{scenario}/rollouts/{rollout_id}/promote")
        assert assert_reef_error(promote_ended, 409)["error"]["code"] == "rollout_ended"

    rollout_id = start(dep, scenario, second).json()["rollout_id"]
    with dep.client(timeout=dep.decide_timeout + 30) as client:
        promoted = client.post(f"/reef/scenarios/{scenario}/rollouts/{rollout_id}/promote")
    assert promoted.status_code == 200, promoted.text
    body = promoted.json()
    assert (body["rollout"]["status"], body["rollout"]["reason"]) == ("promoted", "manual")
    release = body["release"]
    assert (release["operation"], release["current"]) == ("promote", True)
    assert release["rollback_target_release_id"] == second
    assert release["parent_release_id"] == head
    assert dep.head(scenario)["release_id"] == release["release_id"]


def test_an_agent_installs_the_harness_of_the_arm_its_session_is_routed_to(
    dep: Deployment,
) -> None:
    scenario = dep.create_scenario("canary-harness")
    head_rules = dep.content.publish_files({"system_prompt.md": "the head's rules"})
    dep.propose_training(scenario, head_rules)
    candidate = held_release(dep, scenario, "the candidate's rules")
    started = start(dep, scenario, candidate, share=0.5, min_exchanges=100_000).json()
    seen: set[str] = set()
    with dep.client(dep.read_token, scenario=scenario) as client:
        for n in range(16):
            session = f"harness-{n}"
            tag = {"x-reef-tag-session": session}
            files = client.get("/reef/harness", headers=tag)
            assert files.status_code == 200, files.text
            arm = expected_arm(scenario, started, session)
            assert files.json()["release_id"] == arm
            prompt = files.json()["files"]["system_prompt.md"]
            assert prompt == ("the candidate's rules" if arm == candidate else "the head's rules")
            script = client.get("/reef/harness/install?adapter=claude", headers=tag)
            assert script.status_code == 200, script.text
            assert script.headers["x-reef-release-id"] == arm
            assert served(dep, scenario, session)[1] == arm  # its exchanges: the same arm
            seen.add(arm)
        untagged = client.get("/reef/harness")
    assert seen == {started["head_release_id"], candidate}
    assert untagged.json()["release_id"] == started["head_release_id"]


def test_a_candidate_slower_than_the_latency_objective_is_rolled_back_for_latency(
    dep: Deployment,
) -> None:
    """Sessions routed to the candidate run its (slower) harness: the scripted upstream
    waits 0.3 s before answering them. Scores are equal, so only latency can decide."""
    scenario = dep.create_scenario("canary-slow")
    candidate = held_release(dep, scenario, "slow")
    started = start(dep, scenario, candidate, share=0.5, latency_slo_ms=150.0).json()
    assert started["latency_slo_ms"] == 150.0

    def one(session: str) -> None:
        slow = expected_arm(scenario, started, session) == candidate
        headers = {"Authorization": f"Bearer {dep.admin_token}", "x-reef-scenario": scenario}
        headers["x-reef-tag-session"] = session
        text = f"hello {session}" + (" __sleep_0.3__" if slow else "")
        with httpx.Client(base_url=dep.base_url, headers=headers, timeout=60) as client:
            response = client.post("/v1/chat/completions", json=chat_body(text))
        assert response.status_code == 200, response.text
        dep.report(scenario, [response.headers["x-reef-agent-record-id"]], 0.5)

    with ThreadPoolExecutor(4) as pool:
        for _ in range(MAX_EXCHANGES // 16):
            list(pool.map(one, [f"slow-{uuid.uuid4().hex[:12]}" for _ in range(16)]))
            rollout = rollout_of(dep, scenario, started["rollout_id"])
            if rollout["status"] != "active":
                break
    assert (rollout["status"], rollout["reason"]) == ("rolled_back", "latency"), rollout
    figures = rollout["figures"]
    # a loaded machine may make a head exchange slow too; the candidate's always are
    assert figures["candidate"]["slow_rate"] == 1.0 > figures["head"]["slow_rate"], figures
    assert dep.head(scenario)["release_id"] == started["head_release_id"]


def test_a_rollout_with_no_traffic_is_rolled_back_when_its_max_duration_passes(
    dep: Deployment,
) -> None:
    scenario = dep.create_scenario("canary-quiet")
    candidate = held_release(dep, scenario, "quiet")
    rollout_id = start(dep, scenario, candidate, max_duration_s=1.5).json()["rollout_id"]
    deadline = time.monotonic() + 30
    while (rollout := rollout_of(dep, scenario, rollout_id))["status"] == "active":
        assert time.monotonic() < deadline, rollout
        time.sleep(0.2)
    assert (rollout["status"], rollout["reason"]) == ("rolled_back", "max_duration"), rollout
    assert rollout["figures"]["elapsed_s"] >= 1.5, rollout
    assert dep.head(scenario)["release_id"] != candidate


def test_two_api_replicas_route_every_session_alike(
    dep: Deployment, upstream: UpstreamProcess, tmp_path: Path
) -> None:
    """A second API process routes every session as the first: on Kafka another `reef
    serve`; on the embedded log an API-only process on the same log file (`serve_role:
    api`, what the other workers of `reef serve --workers` are)."""
    scenario = dep.create_scenario("canary-replicas")
    candidate = held_release(dep, scenario, "replicas")
    started = start(dep, scenario, candidate, min_exchanges=100_000).json()
    env = _env(dep.admin_token, dep.read_token)
    if dep.name == "embedded":
        second = start_reef(
            ["--upstream-url", upstream.v1_url],
            env={**env, "REEF_SERVE_ROLE": "api"},
            state_dir=dep.state_dir,
        )
    else:
        second = start_reef(
            [*dep.log_flags, "--upstream-url", upstream.v1_url],
            env=env,
            state_dir=tmp_path / "r2",
        )
    try:
        # twelve sessions the rollout's draw sends to each arm (chosen, not left to
        # chance: 24 random sessions all fall to the head at a share of 0.2 in 0.5% of runs)
        by_arm: dict[str, list[str]] = {}
        for name in (f"r-{n}" for n in range(10_000)):
            by_arm.setdefault(expected_arm(scenario, started, name), []).append(name)
            if len(by_arm) == 2 and all(len(names) >= 12 for names in by_arm.values()):
                break
        sessions = [name for names in by_arm.values() for name in names[:12]]
        one = {s: served(dep, scenario, s)[1] for s in sessions}
        two = {s: served(dep, scenario, s, second.base_url)[1] for s in sessions}
    finally:
        second.stop()
    assert one == two == {s: expected_arm(scenario, started, s) for s in sessions}
    assert set(one.values()) == {started["head_release_id"], candidate}


def test_replay_finds_the_controllers_state_and_every_decision(dep: Deployment) -> None:
    scenario = dep.create_scenario("canary-replay")
    candidate = held_release(dep, scenario, "replay")
    rollout_id = start(dep, scenario, candidate).json()["rollout_id"]
    for n in range(10):
        exchange_and_report(dep, scenario, f"replay-{n}", lambda r: 0.5)
    with dep.client() as client:
        rolled = client.post(f"/reef/scenarios/{scenario}/rollouts/{rollout_id}/rollback")
    assert rolled.status_code == 200, rolled.text
    decided = dep.events("reef.releases")
    assert [e.rollout_id for e in decided if isinstance(e, RolloutDecided)].count(rollout_id) == 1

    result = run_reef("replay", "--compare-live", *dep.log_flags, env=ENV, timeout=180)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    report = json.loads(result.stdout)
    assert report["equal"] is True and "rollouts" in report["live"], report


def test_status_metrics_and_audit_show_the_live_rollout(dep: Deployment) -> None:
    scenario = dep.create_scenario("canary-visible")
    candidate = held_release(dep, scenario, "visible")
    started = start(dep, scenario, candidate, share=0.5, min_exchanges=100_000).json()
    receipts: dict[str, str] = {}
    for n in range(20):
        receipt, release = served(dep, scenario, f"visible-{n}")
        dep.report(scenario, [receipt], 1.0 if release == candidate else 0.5)
        receipts.setdefault(release, receipt)
    assert set(receipts) == {started["head_release_id"], candidate}

    deadline = time.monotonic() + 30
    while True:
        with dep.client(dep.read_token) as client:
            rollout = client.get("/reef/status").json()["scenarios"][scenario]["rollout"]
        figures = rollout["figures"]
        arms = (figures.get("head", {}), figures.get("candidate", {}))
        if sum(a.get("scores", 0) for a in arms) == 20:
            break
        assert time.monotonic() < deadline, rollout
        time.sleep(0.5)
    assert (rollout["rollout_id"], rollout["status"]) == (started["rollout_id"], "active")
    head, cand = arms
    assert head["exchanges"] + cand["exchanges"] == 20
    assert (cand["mean_score"], head["mean_score"]) == (1.0, 0.5)
    assert figures["verdict"] == "continue" and 0 < figures["p_better"] <= 1

    with dep.client(dep.read_token) as client:
        metrics = client.get("/metrics").text
    assert f'reef_rollout_share{{scenario="{scenario}"}} 0.5' in metrics
    assert f'reef_rollout_mean_score{{arm="candidate",scenario="{scenario}"}} 1.0' in metrics
    assert f'reef_rollout_exchanges{{arm="head",scenario="{scenario}"}}' in metrics
    assert 'reef_rollouts_total{status="active"}' in metrics

    for release, receipt in receipts.items():
        trail = json.loads(dep.cli("audit", "trail", receipt).stdout)
        arm = "candidate" if release == candidate else "head"
        assert trail["rollout"]["rollout_id"] == started["rollout_id"], trail
        assert trail["rollout"]["arm"] == arm

    shown = run_reef("status", "--url", dep.base_url, "--token", dep.admin_token)
    assert shown.returncode == 0, shown.stderr
    assert started["rollout_id"][:12] in shown.stdout
