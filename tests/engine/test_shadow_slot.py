"""A shadow release answered by Reef's own engine from its named slot, never returned.

End to end: ``reef serve`` on the local tiny engine with its in-process sidecar and
``REEF_ROLLOUTS``. A pending release of other weights (the tiny model of another seed)
starts a shadow rollout of every session; the sidecar loads it into the slot. Every
client gets the head's greedy answer, recorded as served by the head; each copy is
answered by the candidate's weights (``served_release_id``: the engine's report) with
the candidate's own greedy answer, and linked to the served exchange.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from reef.core import topics
from reef.core.events import InferenceRecorded
from reef.core.shadow import shadow_receipt
from reef.testing.servers import ReefProcess, start_reef
from tests.support.engine import WeightSets
from tests.support.sidecar import (
    TOKEN,
    chat_body,
    committed,
    create_scenario,
    events,
    known_to_api,
    propose,
    publish,
    reef_client,
    wait_until,
)

pytestmark = pytest.mark.slow


def test_the_engine_answers_shadow_copies_from_its_slot_and_clients_only_the_head(
    tmp_path: Path, weight_sets: WeightSets
) -> None:
    scenario = f"shadow-engine-{uuid.uuid4().hex[:8]}"
    env = {"REEF_TOKEN": TOKEN, "REEF_ENGINE_SCENARIO": scenario, "REEF_ROLLOUTS": "true"}
    state = tmp_path / "state"
    reef = start_reef([], env=env, state_dir=state, timeout=240.0, name="reef-shadow-engine")
    try:
        head = create_scenario(reef, scenario)
        content = publish(state, weight_sets.seed_b)
        proposal = propose(state, scenario, head, content, pending=True)
        candidate = known_to_api(reef, scenario, committed(state, scenario, proposal, pending=True))
        with reef_client(reef) as client:
            response = client.post(
                f"/reef/scenarios/{scenario}/rollouts",
                json={
                    "release_id": candidate,
                    "mode": "shadow",
                    "share": 1.0,
                    "min_exchanges": 100_000,
                },
            )
        assert response.status_code == 201, response.text

        def copy_of(receipt: str) -> InferenceRecorded | None:
            for event in events(state, topics.INFERENCE, scenario):
                if isinstance(event, InferenceRecorded) and event.shadow_of == receipt:
                    return event
            return None

        def candidate_answered(session: str) -> bool:
            receipt = ask(reef, scenario, session)[0]
            copy = wait_until("the copy to be recorded", lambda: copy_of(receipt), 60)
            assert isinstance(copy, InferenceRecorded)
            return copy.served_release_id == candidate

        wait_until(
            "the sidecar to load the candidate's slot",
            lambda: candidate_answered(f"warm-{uuid.uuid4().hex[:6]}"),
            timeout=120,
        )
        served = {ask(reef, scenario, f"s{n}") for n in range(4)}
        assert {release for _, release, _ in served} == {head}
        (head_answer,) = {answer for _, _, answer in served}
        wanted = {shadow_receipt(receipt) for receipt, _, _ in served}

        def recorded() -> dict[str, InferenceRecorded] | None:
            found = {
                e.event_id: e
                for e in events(state, topics.INFERENCE, scenario)
                if isinstance(e, InferenceRecorded)
            }
            return found if wanted <= set(found) else None

        records: dict[str, InferenceRecorded] = wait_until("every copy recorded", recorded, 60)
        copies = [records[shadow_receipt(receipt)] for receipt, _, _ in served]
        for (receipt, _, _), copy in zip(served, copies, strict=True):
            assert records[receipt].served_release_id == head
            assert (copy.shadow_of, copy.served_release_id) == (receipt, candidate)
        candidate_answers = {
            json.loads(c.response_json or "{}")["choices"][0]["message"]["content"] for c in copies
        }
        assert len(candidate_answers) == 1 and head_answer not in candidate_answers
    finally:
        reef.stop()


def ask(reef: ReefProcess, scenario: str, session: str) -> tuple[str, str, str]:
    """(receipt, release header, answer) of one greedy tagged exchange."""
    headers = {"x-reef-scenario": scenario, "x-reef-tag-session": session}
    with reef_client(reef) as client:
        response = client.post("/v1/chat/completions", json=chat_body(False), headers=headers)
    assert response.status_code == 200, response.text
    answer = response.json()["choices"][0]["message"]["content"]
    return response.headers["x-reef-agent-record-id"], response.headers["x-reef-release-id"], answer
