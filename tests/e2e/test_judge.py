"""The judge end to end on the embedded log: ``reef serve`` with sessions tracked and
``REEF_JUDGE_TURNS`` on judges each completed turn in-process.

The deployment's upstream is the scripted judge stand-in (reef/testing/judge_upstream.py,
on loopback: fixed rules, no model), which answers the agent's requests as the scripted
upstream and the judge's prompts by the next state; no judge URL is set, so the judge
asks the deployment's upstream. A user who thanks scores the turn +1, one who corrects
it -1, and a judge that answers HTTP 500 leaves a failed judgement with its reason.
The same judgements are then visible in ``reef audit trail``, ``/reef/status`` and
``/metrics``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reef.core.events import TurnJudged
from reef.core.topics import JUDGEMENTS
from reef.testing.servers import UpstreamProcess, run_reef, running_upstream
from tests.support.api import unique_scenario
from tests.support.reef_server import ReefServer, launch

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def judge_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    with running_upstream(tmp_path_factory.mktemp("judge"), "reef.testing.judge_upstream") as up:
        yield up


@pytest.fixture(scope="module")
def server(
    judge_upstream: UpstreamProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReefServer]:
    env = {
        "REEF_TRACK_SESSIONS": "true",
        "REEF_FINGERPRINT_SECRET": "e2e-judge-secret",
        "REEF_JUDGE_TURNS": "true",
        "REEF_JUDGE_TIMEOUT_S": "10",
    }
    started = launch(
        "embedded", upstream=judge_upstream, state_dir=tmp_path_factory.mktemp("judged"), env=env
    )
    yield started
    started.stop()


def judgements(server: ReefServer, scenario: str, count: int) -> list[TurnJudged]:
    deadline = time.monotonic() + 15
    while True:
        found = [e for e in server.events(JUDGEMENTS, scenario) if isinstance(e, TurnJudged)]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def eventually(read: Callable[[], Any], wanted: Callable[[Any], bool]) -> Any:
    """``read()`` once ``wanted`` holds for it, or its last value after 15 s."""
    deadline = time.monotonic() + 15
    while not wanted(found := read()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def ask(client: httpx.Client, messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    response = client.post("/v1/chat/completions", json={"messages": messages, "tools": TOOLS})
    assert response.status_code == 200, response.text
    return response.headers["x-reef-agent-record-id"], response.json()["choices"][0]["message"]


def test_turns_are_judged_by_what_came_next_and_a_failed_judgement_says_why(
    server: ReefServer, judge_upstream: UpstreamProcess
) -> None:
    scenario = unique_scenario("judge")
    replies = ["thanks, next one: 3+3?", "no, that is wrong", "__judge_fails__ fine", "bye"]
    receipts: list[str] = []
    with server.client(scenario) as client:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "what is 2+2?"}]
        for reply in replies:
            receipt, said = ask(client, messages)
            receipts.append(receipt)
            messages = [*messages, said, {"role": "user", "content": reply}]
    found = {j.receipt_id: j for j in judgements(server, scenario, 3)}
    assert sorted(found) == sorted(receipts[:3])  # the last turn has no next state yet
    first, second, third = (found[r] for r in receipts[:3])
    assert (first.score, first.votes, first.failed_reason) == (1, [1, 1, 1], None)
    assert (second.score, second.votes, second.next_state_role) == (-1, [-1, -1, -1], "user")
    assert (second.next_receipt_id, second.turn_index) == (receipts[2], 1)
    assert third.failed and third.score == 0 and third.invalid_votes == 3
    assert third.failed_reason is not None and "HTTP 500" in third.failed_reason
    # the judge asked the deployment's upstream, which saw the next state in each prompt
    assert judge_upstream.requests(contains="no, that is wrong")
    assert len({j.event_id for j in found.values()}) == 3
    visible(server, scenario, receipts)


def visible(server: ReefServer, scenario: str, receipts: list[str]) -> None:
    """The judgements of the test above, as the operator sees them."""
    trail = run_reef("audit", "trail", receipts[1], "--state-dir", str(server.state_dir))
    assert trail.returncode == 0, trail.stderr
    turn = json.loads(trail.stdout)["turn"]
    assert (turn["turn_index"], turn["completes_receipt_id"], turn["expired"]) == (
        1,
        receipts[0],
        None,
    )
    completed, judgement = turn["completed"], turn["judgement"]
    assert (completed["next_receipt_id"], completed["next_state_role"]) == (receipts[2], "user")
    assert (judgement["score"], judgement["votes"], judgement["failed_reason"]) == (
        -1,
        [-1, -1, -1],
        None,
    )
    assert judgement["hints"] == 0
    last = json.loads(
        run_reef("audit", "trail", receipts[3], "--state-dir", str(server.state_dir)).stdout
    )
    assert last["turn"]["turn_index"] == 3
    assert last["turn"]["completed"] is None and last["turn"]["judgement"] is None

    expected = {
        "turns_completed": 3,
        "sessions_expired": 0,
        "turns_judged": {"+1": 1, "-1": 1, "0": 0},
        "judgements_failed": 1,
    }
    with server.client() as client:
        status = eventually(
            lambda: client.get("/reef/status").json(),
            lambda body: (
                body["scenarios"][scenario].get("turns") == expected
                and body["judge"]["in_flight"] == 0
            ),
        )
        metrics = client.get("/metrics")
    assert status["scenarios"][scenario]["turns"] == expected
    judge = status["judge"]
    assert (judge["in_flight"], judge["error"], judge["judged"], judge["failed"]) == (0, None, 3, 1)
    assert metrics.status_code == 200, metrics.text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.text)
        for s in family.samples
    }
    assert samples[("reef_turns_completed_total", ())] == 3
    assert samples[("reef_sessions_expired_total", ())] == 0
    assert samples[("reef_turns_judged_total", (("decision", "+1"),))] == 1
    assert samples[("reef_turns_judged_total", (("decision", "-1"),))] == 1
    assert samples[("reef_turns_judged_total", (("decision", "0"),))] == 0
    assert samples[("reef_judgements_failed_total", ())] == 1
    assert samples[("reef_judge_in_flight", ())] == 0
