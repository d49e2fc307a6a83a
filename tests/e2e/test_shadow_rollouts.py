"""Shadow rollouts end to end, on both logs: ``reef serve`` with ``REEF_ROLLOUTS`` (on
Kafka a ``reef streams`` worker hosts the processors), the scripted upstream, pending
harness releases proposed as a trainer would.

* clients get the head's answers only (body, receipt and release header), buffered and
  streamed; the candidate's copy reaches the upstream with the candidate's system prompt
  and the ``x-reef-serve-release`` header;
* each copy is recorded once, sealed, linked (``shadow_of``), named by the served
  exchange's audit trail, and shown in status and metrics;
* a grader's reports on the copies score the candidate: a worse one is rolled back by
  the controller; the samples of the copies are marked, so no trainer admits them
  (``reef.core.shadow.trains``; the trainer's side is
  tests/unit/trainers/test_trainer_shadow.py);
* erasing a served exchange erases its copy too.

The server (and worker) are started once per log for this module and the other rollout
module (``rollouts_dep``, tests/e2e/conftest.py).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest

from reef.core import topics
from reef.core.events import InferenceRecorded, SampleJoined
from reef.core.shadow import shadow_receipt, trains
from reef.testing.servers import UpstreamProcess
from tests.support.api import chat_body
from tests.support.deployment import Deployment

ENV = {"REEF_ROLLOUTS": "true"}
HEAD_PROMPT = "You are the head."
#: a shadow rollout of every session that never decides by itself
WATCHING = {"mode": "shadow", "share": 1.0, "min_exchanges": 100_000, "max_duration_s": 3600.0}
COPY_TIMEOUT = 30.0


@pytest.fixture
def dep(rollouts_dep: Deployment) -> Deployment:
    """The package's rollouts deployment of this test's log (tests/e2e/conftest.py)."""
    return rollouts_dep


# ---------------------------------------------------------------------------
# Helpers


def shadow_rollout(dep: Deployment, prefix: str, **policy: Any) -> tuple[str, dict[str, Any]]:
    """A scenario whose held harness candidate shadows the head: (scenario, the rollout)."""
    scenario = dep.create_scenario(prefix)
    prompt = f"You are the candidate {uuid.uuid4().hex[:8]}."
    content = dep.content.publish_files({"system_prompt.md": prompt})
    candidate = dep.propose_training(scenario, content, pending=True)["release_id"]
    with dep.client() as client:
        response = client.post(
            f"/reef/scenarios/{scenario}/rollouts",
            json={"release_id": candidate, **WATCHING, **policy},
        )
    assert response.status_code == 201, response.text
    rollout: dict[str, Any] = response.json()
    assert (rollout["mode"], rollout["candidate_release_id"]) == ("shadow", candidate)
    return scenario, {**rollout, "prompt": prompt}


def body(text: str, **extra: Any) -> dict[str, Any]:
    chat = chat_body(text, **extra)
    chat["messages"].insert(0, {"role": "system", "content": HEAD_PROMPT})
    return chat


def ask(dep: Deployment, scenario: str, text: str, session: str) -> httpx.Response:
    headers = {"x-reef-tag-session": session}
    with dep.client(scenario=scenario) as client:
        response = client.post("/v1/chat/completions", json=body(text), headers=headers)
    assert response.status_code == 200, response.text
    return response


def ask_streamed(dep: Deployment, scenario: str, text: str) -> tuple[str, str, httpx.Headers]:
    """One streamed exchange: (the answer's text, its receipt, the response headers)."""
    with (
        dep.client(scenario=scenario) as client,
        client.stream("POST", "/v1/chat/completions", json=body(text, stream=True)) as response,
    ):
        assert response.status_code == 200
        frames = [line.removeprefix("data: ") for line in response.iter_lines()]
        headers = response.headers
    chunks = [json.loads(f) for f in frames if f.startswith("{")]
    answer = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )
    (receipt,) = [c["reef"]["agent_record_id"] for c in chunks if "reef" in c]
    return answer, receipt, headers


def copies_of(dep: Deployment, receipts: list[str]) -> dict[str, InferenceRecorded]:
    """The recorded copy of each served receipt, once all are in the log."""
    deadline = time.monotonic() + COPY_TIMEOUT
    while True:
        found = {
            e.shadow_of: e
            for e in dep.events(topics.INFERENCE)
            if isinstance(e, InferenceRecorded) and e.shadow_of in receipts
        }
        if len(found) == len(receipts):
            return found
        dep.alive()
        assert time.monotonic() < deadline, f"{len(found)} of {len(receipts)} copies recorded"
        time.sleep(0.2)


def answer_of(response_json: str | None) -> str:
    parsed = json.loads(response_json or "null")
    text: str = parsed["choices"][0]["message"]["content"]
    return text


def live_rollout(dep: Deployment, scenario: str) -> dict[str, Any]:
    with dep.client(dep.read_token) as client:
        status = client.get("/reef/status").json()
    rollout: dict[str, Any] = status["scenarios"][scenario]["rollout"]
    return rollout


# ---------------------------------------------------------------------------
# Tests


def test_clients_see_the_heads_answers_and_each_copy_is_recorded_and_linked(
    dep: Deployment, upstream: UpstreamProcess
) -> None:
    scenario, rollout = shadow_rollout(dep, "shadow-seen")
    head, candidate = rollout["head_release_id"], rollout["candidate_release_id"]
    tag = uuid.uuid4().hex[:8]
    served: dict[str, str] = {}  # receipt -> the text asked
    for n in range(3):
        text = f"buffered {tag} {n}"
        response = ask(dep, scenario, text, f"s-{tag}-{n}")
        assert response.headers["x-reef-release-id"] == head
        assert response.json()["choices"][0]["message"]["content"] == f"ok: {text}"
        assert candidate not in str(response.headers) and rollout["prompt"] not in response.text
        served[response.headers["x-reef-agent-record-id"]] = text
    text = f"streamed {tag}"
    answer, receipt, headers = ask_streamed(dep, scenario, text)
    assert (answer, headers["x-reef-release-id"]) == (f"ok: {text}", head)
    served[receipt] = text

    copies = copies_of(dep, list(served))
    raw = {
        s.event.event_id: s.event
        for s in dep.stored(topics.INFERENCE, raw=True)
        if isinstance(s.event, InferenceRecorded)
    }
    for receipt, text in served.items():
        copy = copies[receipt]
        assert copy.event_id == shadow_receipt(receipt) and copy.event_id not in served
        assert (copy.release_id, copy.complete, copy.status, copy.stream) == (
            candidate,
            True,
            200,
            False,
        )
        assert answer_of(copy.response_json) == f"ok: {text}"
        sent = json.loads(copy.request_json or "{}")
        assert sent["messages"][0] == {"role": "system", "content": rollout["prompt"]}
        assert raw[copy.event_id].sealed == raw[receipt].sealed
        reached = upstream.requests(contains=text)
        prompts = {r["body"]["messages"][0]["content"]: dict(r["headers"]) for r in reached}
        assert set(prompts) == {HEAD_PROMPT, rollout["prompt"]}, reached
        assert "x-reef-serve-release" not in prompts[HEAD_PROMPT]
        assert prompts[rollout["prompt"]]["x-reef-serve-release"] == candidate

    first = next(iter(served))
    trail = json.loads(dep.cli("audit", "trail", first).stdout)
    assert trail["shadow"]["receipt"] == shadow_receipt(first)
    assert (trail["rollout"]["mode"], trail["rollout"]["arm"]) == ("shadow", "head")

    deadline = time.monotonic() + COPY_TIMEOUT
    while (figures := live_rollout(dep, scenario).get("figures", {})).get("candidate", {}).get(
        "exchanges"
    ) != len(served):
        assert time.monotonic() < deadline, figures
        time.sleep(0.3)
    assert figures["head"]["exchanges"] == len(served)
    assert live_rollout(dep, scenario)["mode"] == "shadow"
    with dep.client(dep.read_token) as client:
        metrics = client.get("/metrics").text
    assert f'reef_rollout_mode{{mode="shadow",scenario="{scenario}"}} 1.0' in metrics
    assert 'reef_shadow_copies_total{outcome="sent"}' in metrics


def test_a_worse_shadow_candidate_is_rolled_back_and_its_copies_never_train(
    dep: Deployment,
) -> None:
    scenario, rollout = shadow_rollout(dep, "shadow-worse", min_exchanges=8)
    head, candidate = rollout["head_release_id"], rollout["candidate_release_id"]
    graded: dict[str, str] = {}  # copy receipt -> grader's report id
    for round_ in range(12):
        receipts = []
        for n in range(8):
            response = ask(dep, scenario, f"worse {round_} {n}", f"w-{round_}-{n}")
            receipts.append(response.headers["x-reef-agent-record-id"])
            dep.report(scenario, receipts[-1:], 1.0)  # the head's answers are good
        for copy in copies_of(dep, receipts).values():  # a grader who reads the log
            graded[copy.event_id] = dep.report(scenario, [copy.event_id], 0.0)
        status = live_rollout(dep, scenario)
        if status["rollout_id"] == rollout["rollout_id"] and status["status"] != "active":
            break
    assert (status["status"], status["reason"]) == ("rolled_back", "statistic"), status
    figures = status["figures"]
    assert figures["candidate"]["mean_score"] == 0.0 and figures["head"]["mean_score"] == 1.0
    assert figures["candidate"]["exchanges"] > 0
    assert dep.head(scenario)["release_id"] == head
    (held,) = [r for r in dep.releases(scenario) if r["release_id"] == candidate]
    assert held["pending"] is True

    samples = [e for e in dep.events(topics.SAMPLES) if isinstance(e, SampleJoined)]
    of_copies = [s for s in samples if set(s.references) & set(graded)]
    of_served = [s for s in samples if s.scenario == scenario and s not in of_copies]
    assert of_copies and of_served
    assert all(s.release_ids == [candidate] and not trains(s) for s in of_copies)
    assert all(trains(s) for s in of_served)


def test_erasing_a_served_exchange_erases_its_copy(dep: Deployment) -> None:
    scenario, _ = shadow_rollout(dep, "shadow-erase")
    kept = ask(dep, scenario, "keep me", "e-1").headers["x-reef-agent-record-id"]
    gone = ask(dep, scenario, "erase me", "e-2").headers["x-reef-agent-record-id"]
    copies_of(dep, [kept, gone])

    with dep.client() as client:
        erased = client.delete(f"/reef/scenarios/{scenario}/records/{gone}")
        assert erased.status_code == 200, erased.text
        assert erased.json()["shadows_erased"] == [shadow_receipt(gone)]
        again = client.delete(f"/reef/scenarios/{scenario}/records/{shadow_receipt(gone)}")
        assert again.status_code == 200, again.text
        assert again.json()["already_erased"] is True
        own = client.delete(f"/reef/scenarios/{scenario}/records/{shadow_receipt(kept)}")
        assert own.status_code == 200 and own.json()["already_erased"] is False
    stored = {
        s.event.event_id: s.erased
        for s in dep.stored(topics.INFERENCE)
        if isinstance(s.event, InferenceRecorded) and s.event.scenario == scenario
    }
    assert stored[gone] and stored[shadow_receipt(gone)] and stored[shadow_receipt(kept)]
    assert not stored[kept]
