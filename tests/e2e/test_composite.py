"""``composite`` end to end on the embedded log: one scenario evolves its weights and its
harness; each part is gated alone; a rollback restores both.

``reef serve`` serves the local tiny engine (its sidecar loads a release's ``weights/``
part) and runs the ``composite`` trainer in-process: the ``weights`` part is ``sft``
(gated on "Task: <word>" → the word reversed, greedy on the tiny model), the
``harness`` part is ``harness_evolve`` asking the scripted harness stand-in
(reef/testing/harness_upstream.py: its agent reverses the word only under a harness
carrying the rule; its proposer appends the rule when it sees failures, a useless rule
when the batch carries ``__propose_useless__``). The scenario starts from a composite
seed: a harness part (no rule) and no weights part (the engine's base model).

1. Corrections to the reversed words, with the useless-proposal marker: the weights
   part is better and taken, the harness edit ties and is refused; the release carries
   both parts (the new weights, the seed harness).
2. A wrong grader "corrects" each answer to the word itself: the weights part is worse
   and refused, the harness proposer appends the rule, which wins: the release keeps the
   served weights (the same objects, the same answers) and takes the new harness.
3. A rollback to the creation release restores both parts: the seed harness is served
   and the engine answers as its base model again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from recipes.tasks import exact
from reef.artifacts import LocalArtifactStore, Manifest
from reef.artifacts.content import ContentStore
from reef.artifacts.parts import PARTS_FILE
from reef.testing.harness_upstream import RULE, USELESS
from reef.testing.servers import running_upstream
from tests.support.api import unique_scenario
from tests.support.learning import learning_deployment
from tests.support.learning_loop import TOKEN, Loop, ToyTask, engine_env

pytestmark = pytest.mark.slow

REVERSE = ToyTask("Task: ", lambda word: word[::-1])
WORDS = ["otter", "maple", "quartz", "cobalt"]  # reported, and the weights part's gate
GATE_WORDS = ["lantern", "pebble", "harbor"]  # the harness part's gate (the stand-in)
SEED = "You are a careful assistant.\nAnswer each task with a single word.\n"


def recipe_yaml(tmp: Path, harness_url: str) -> Path:
    def tasks(words: list[str]) -> str:
        return json.dumps(
            [{"prompt": REVERSE.prompt(w), "answer": REVERSE.answer(w)} for w in words]
        )

    config = tmp / "composite.yaml"
    config.write_text(
        f"""
recipe:
  batching: {{batch-size: {len(WORDS)}}}
  weights:
    recipe: sft
    training: {{steps: 30, learning-rate: 0.003}}
    evaluation: {{tasks: {tasks(WORDS)}, max-new-tokens: 10}}
    gate: {{policy: win_margin}}
  harness:
    recipe: harness_evolve
    upstream: {{base-url: "{harness_url}", model: stub-model, seed: 0}}
    evaluation: {{tasks: {tasks(GATE_WORDS)}, max-new-tokens: 32}}
    gate: {{margin: 0.5}}
"""
    )
    return config


def composite_seed(tmp: Path) -> Path:
    seed = tmp / "seed"
    (seed / "harness").mkdir(parents=True)
    (seed / "harness" / "system_prompt.md").write_text(SEED)
    (seed / PARTS_FILE).write_text(json.dumps({"parts": ["harness"]}) + "\n")
    return seed


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loop]:
    scenario = unique_scenario("composite")
    with running_upstream(tmp_path / "upstream", module="reef.testing.harness_upstream") as up:
        env = engine_env(scenario, "composite", recipe_yaml(tmp_path, up.v1_url))
        env["REEF_SEED_DIR"] = str(composite_seed(tmp_path))
        with learning_deployment(
            "embedded", tmp_path, env, token=TOKEN, group="trainer:composite"
        ) as deployment:
            yield Loop(deployment, scenario, REVERSE)


def harness(loop: Loop) -> dict[str, Any]:
    with loop.client() as client:
        response = client.get("/reef/harness")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def release_row(loop: Loop, release_id: str) -> dict[str, Any]:
    with loop.client() as client:
        rows = client.get("/reef/harness/releases").json()["releases"]
    [row] = [r for r in rows if r["release_id"] == release_id]
    found: dict[str, Any] = row
    return found


def part(loop: Loop, content_id: str, name: str) -> dict[str, str]:
    """{path: oid} of one part of a release's manifest, read from the artifact store."""
    store = ContentStore(LocalArtifactStore.in_state_dir(loop.deployment.state_dir))
    manifest: Manifest = store.load(content_id)
    prefix = f"{name}/"
    return {p: e.oid for p, e in manifest.items() if p.startswith(prefix)}


def answers(loop: Loop, release_id: str) -> list[str]:
    """The engine's greedy answers once it serves ``release_id`` (no system prompt)."""
    assert loop.wait_engine_on_head() == release_id
    asked = loop.ask_all(WORDS)
    assert {served for _, _, served in asked} == {release_id}
    return [a for a, _, _ in asked]


def train_round(loop: Loop, *, grader: ToyTask, note: str = "") -> str:
    """Ask every word under the head, report each answer as ``grader`` scores and
    corrects it, wait for the trainer; the new head."""
    before = harness(loop)["release_id"]
    asked = loop.ask_all(WORDS)
    loop.post_reports(
        [
            {
                "score": grader.score(answer, word),
                "feedback": {"correction": grader.answer(word), "note": note},
                "references": [receipt],
            }
            for (answer, receipt, _), word in zip(asked, WORDS, strict=True)
        ]
    )
    loop.trainer_done()
    after: str = harness(loop)["release_id"]
    assert after != before, loop.deployment.trainer_log()[-4000:]
    return after


def admin(loop: Loop) -> httpx.Client:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    return httpx.Client(base_url=loop.deployment.base_url, headers=headers, timeout=60.0)


def test_each_part_is_gated_alone_and_a_rollback_restores_both(loop: Loop) -> None:
    with admin(loop) as client:
        created = client.post("/reef/scenarios", json={"name": loop.scenario})
    assert created.status_code == 201, created.text
    seed = harness(loop)  # the creation release: the composite seed
    assert seed["files"] == {"system_prompt.md": SEED}  # the harness part only
    base_answers = [a for a, _, _ in loop.ask_all(WORDS)]

    # 1: better weights, a useless harness edit
    first = train_round(loop, grader=REVERSE, note=USELESS)
    row = release_row(loop, first)
    assert row["metrics"]["weights/taken"] == 1.0 and row["metrics"]["harness/taken"] == 0.0
    assert row["evaluation"]["decision"]["selected"] is True
    assert harness(loop)["files"] == {"system_prompt.md": SEED}
    first_content = harness(loop)["content_id"]
    first_weights = part(loop, first_content, "weights")
    assert "weights/model.safetensors" in first_weights
    trained = answers(loop, first)
    assert trained != base_answers
    assert sum(exact(a, w[::-1]) for a, w in zip(trained, WORDS, strict=True)) > 0

    # 2: worse weights, a better harness: the harness is taken over the served weights
    wrong = ToyTask("Task: ", lambda word: word)
    second = train_round(loop, grader=wrong)
    row = release_row(loop, second)
    metrics = row["metrics"]
    assert metrics["weights/taken"] == 0.0 and metrics["harness/taken"] == 1.0
    assert metrics["weights/candidate_score"] < metrics["weights/served_score"]
    assert metrics["harness/candidate_score"] == 1.0
    decision = row["evaluation"]["decision"]
    assert decision["selected"] is True and decision["policy"] == "composite"
    assert "weights: the served part is kept" in decision["reason"], decision
    served = harness(loop)
    assert served["files"] == {"system_prompt.md": SEED + RULE + "\n"}
    assert part(loop, served["content_id"], "weights") == first_weights
    assert answers(loop, second) == trained

    # 3: a rollback to the creation release restores both parts together
    with admin(loop) as client:
        response = client.post(
            f"/reef/scenarios/{loop.scenario}/rollback", json={"release_id": seed["release_id"]}
        )
    assert response.status_code == 200, response.text
    third = response.json()["release_id"]
    restored = harness(loop)
    assert restored["release_id"] == third and restored["content_id"] == seed["content_id"]
    assert restored["files"] == {"system_prompt.md": SEED}
    assert part(loop, restored["content_id"], "weights") == {}  # the base model
    assert answers(loop, third) == base_answers
