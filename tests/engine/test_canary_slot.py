"""A canary release served by Reef's own engine, beside the head, in a named slot.

* in process: a full-weights folder (or a PEFT adapter) loads as a named slot that
  reports its own weight version; a base update leaves a full-weights slot as it was;
* end to end: ``reef serve`` on the local tiny engine with its in-process sidecar and
  ``REEF_ROLLOUTS``. A pending release of other weights (the tiny model of another seed)
  starts a 50% canary; the sidecar loads it into the slot; every tagged session is
  answered by the arm ``reef.core.routing`` draws for it, with that arm's own greedy
  output, and recorded as served by it (``served_release_id``: the engine's report, not
  the routing label). An engine that loses the slot (unloaded behind the sidecar's back,
  as a restart loses it) gets it back; a rollback unloads the slot and every session is
  the head's again.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from reef.core import topics
from reef.core.events import InferenceRecorded, ReleaseCommitted, ReleaseProposed, utc_now
from reef.core.routing import draw, routing_key, takes
from reef.testing.servers import ReefProcess, start_reef
from tests.support.engine import WeightSets
from tests.support.sidecar import (
    TOKEN,
    append,
    chat_body,
    create_scenario,
    events,
    known_to_api,
    publish,
    reef_client,
    wait_until,
)

pytestmark = pytest.mark.slow


def test_a_full_weights_slot_reports_its_version_and_survives_a_base_update(
    weight_sets: WeightSets,
) -> None:
    import torch

    from reef.engine.model import EngineModel
    from reef.modelkit import tiny

    model = EngineModel(
        tiny.build_model(), tiny.build_tokenizer(), model_path="tiny", weight_version="head"
    )
    model.load_adapter("cand", str(weight_sets.seed_b), weight_version="cand")
    model.load_adapter("ad", str(weight_sets.adapter))
    snapshot = model.snapshot()
    assert snapshot.version_for(None) == "head" and snapshot.version_for("cand") == "cand"
    assert snapshot.version_for("ad") == "head"  # loaded without a version: the base's
    slot = snapshot.module_for("cand")
    first = next(iter(slot.state_dict().values()))
    base = next(iter(snapshot.module_for(None).state_dict().values()))
    assert not torch.equal(first, base)

    model.update_from_disk(str(weight_sets.seed_a), weight_version="head-2")
    after = model.snapshot()
    assert after.module_for("cand") is slot  # a full slot does not follow the base
    assert after.version_for("cand") == "cand" and after.version_for(None) == "head-2"
    model.unload_adapter("cand")
    assert model.snapshot().version_for("cand") == "head-2"  # gone: the default answers


def served(reef: ReefProcess, scenario: str, session: str) -> tuple[str, str, str]:
    """(receipt, release header, answer) of one greedy tagged exchange."""
    headers = {"x-reef-scenario": scenario, "x-reef-tag-session": session}
    with reef_client(reef) as client:
        response = client.post("/v1/chat/completions", json=chat_body(False), headers=headers)
    assert response.status_code == 200, response.text
    answer = response.json()["choices"][0]["message"]["content"]
    return response.headers["x-reef-agent-record-id"], response.headers["x-reef-release-id"], answer


def test_the_engine_serves_the_canary_from_its_slot_and_receipts_say_so(
    tmp_path: Path, weight_sets: WeightSets
) -> None:
    scenario = f"canary-engine-{uuid.uuid4().hex[:8]}"
    env = {"REEF_TOKEN": TOKEN, "REEF_ENGINE_SCENARIO": scenario, "REEF_ROLLOUTS": "true"}
    state = tmp_path / "state"
    reef = start_reef([], env=env, state_dir=state, timeout=240.0, name="reef-canary-engine")
    try:
        head = create_scenario(reef, scenario)
        content = publish(state, weight_sets.seed_b)
        proposal = propose_pending(state, scenario, head, content)
        candidate = known_to_api(reef, scenario, committed_pending(state, scenario, proposal))
        with reef_client(reef) as client:
            response = client.post(
                f"/reef/scenarios/{scenario}/rollouts",
                json={"release_id": candidate, "share": 0.5, "min_exchanges": 100_000},
            )
        assert response.status_code == 201, response.text
        rollout = response.json()

        def arm(session: str) -> str:
            key = routing_key(session, "")
            return candidate if takes(0.5, draw(scenario, rollout["rollout_id"], key)) else head

        sessions = [f"s{n}" for n in range(12)]
        to_candidate = next(s for s in sessions if arm(s) == candidate)
        wait_until(
            "the sidecar to load the canary slot",
            lambda: served(reef, scenario, to_candidate)[1] == candidate,
            timeout=120,
        )
        answers: dict[str, set[str]] = {head: set(), candidate: set()}
        receipts = {}
        for session in sessions:
            receipt, release, answer = served(reef, scenario, session)
            assert release == arm(session), (session, release)
            answers[release].add(answer)
            receipts[receipt] = release
        (head_answer,), (candidate_answer,) = answers[head], answers[candidate]
        assert head_answer != candidate_answer  # two models answered, one per arm
        records = {
            e.event_id: e
            for e in events(state, topics.INFERENCE, scenario)
            if isinstance(e, InferenceRecorded)
        }
        for receipt, release in receipts.items():
            assert records[receipt].served_release_id == release
            assert records[receipt].weight_version == release

        # the engine loses the slot (as when it restarts on its base weights): the sidecar
        # notices on its next round and loads it again
        lost = httpx.post(
            f"{engine_url_of(reef)}/unload_lora_adapter", json={"lora_name": candidate}, timeout=30
        )
        assert lost.status_code == 200 and lost.json()["success"], lost.text
        wait_until(
            "the sidecar to load the lost slot again",
            lambda: served(reef, scenario, to_candidate)[1:] == (candidate, candidate_answer),
            timeout=60,
        )

        with reef_client(reef) as client:
            rolled = client.post(
                f"/reef/scenarios/{scenario}/rollouts/{rollout['rollout_id']}/rollback"
            )
        assert rolled.status_code == 200, rolled.text
        wait_until(
            "the slot to be unloaded",
            lambda: served(reef, scenario, to_candidate)[1:] == (head, head_answer),
            timeout=60,
        )
    finally:
        reef.stop()


def engine_url_of(reef: ReefProcess) -> str:
    """The URL of the local engine ``reef serve`` started as its child (``--port N``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(status.split("PPid:")[1].split()[0])
        if ppid == reef.managed.pid and b"engine" in argv and b"--port" in argv:
            return f"http://127.0.0.1:{int(argv[argv.index(b'--port') + 1])}"
    raise AssertionError("reef serve has no engine child")


def propose_pending(state: Path, scenario: str, parent: str, content: str) -> str:
    proposal = uuid.uuid4().hex
    append(
        state,
        ReleaseProposed(
            event_id=f"proposal-{proposal}",
            scenario=scenario,
            occurred_at=utc_now(),
            producer="canary-test-trainer",
            proposal_id=proposal,
            content_id=content,
            operation="training",
            parent_release_id=parent,
            pending=True,
        ),
    )
    return proposal


def committed_pending(state: Path, scenario: str, proposal: str) -> str:
    def decided() -> str | None:
        for event in events(state, topics.RELEASES, scenario):
            if isinstance(event, ReleaseCommitted) and event.proposal_id == proposal:
                assert event.pending
                return event.release_id
        return None

    found: str = wait_until(f"the chain to hold {proposal}", decided, 30)
    return found
