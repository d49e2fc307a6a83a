"""``gepa`` driven by the real trainer over an embedded log and chain, with the scripted
task and reflection models in-process (:class:`reef.testing.harness_upstream.StandInChat`:
the agent reverses the word of ``Task: <word>`` only when its rules carry ``RULE``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recipes.base import Batch, Parent
from recipes.errors import CandidateRejectedError, RecipeConfigError
from recipes.gepa.recipe import GEPARecipe
from recipes.registry import build_recipe, read_section
from recipes.releases import ReleaseFact
from recipes.samples import Sample, Turn
from recipes.tasks import exact
from reef.artifacts import materialise
from reef.core import topics
from reef.core.events import ReleaseCommitted, SampleJoined, utc_now
from reef.core.ids import new_record_id
from reef.testing.harness_upstream import RULE, USELESS, StandInChat, agent_answer
from tests.support.trainer_harness import Harness, until
from trainers.consumer import Trainer, TrainerConfig

SEED = "You are a careful assistant. Answer with one word."
VALIDATION = ["lantern", "pebble", "harbor", "violet"]


def config(validation: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "batching": {"batch_size": 3},
        "upstream": {"base_url": "http://stand-in.invalid/v1", "model": "stub"},
        "evaluation": {"tasks": validation, "grader": "exact", "max_new_tokens": 32},
        "gepa": {"seed": 0},
    }


def reversal(words: list[str]) -> list[dict[str, str]]:
    return [{"prompt": f"Task: {w}", "answer": w[::-1]} for w in words]


def trainer(harness: Harness, chat: StandInChat, tasks: list[dict[str, str]]) -> Trainer:
    recipe = build_recipe("gepa", config(tasks), chat=chat)
    assert isinstance(recipe, GEPARecipe)
    return Trainer(recipe, harness.store, harness.content, TrainerConfig("gepa", "t", harness.tmp))


async def seeded(harness: Harness, scenario: str) -> str:
    """A scenario whose head serves the seed harness (as an operator would publish it)."""
    creation = await harness.create(scenario, recipe="gepa")
    return await harness.publish_head(scenario, creation, {"system_prompt.md": SEED + "\n"})


async def episodes(
    harness: Harness, scenario: str, served_by: str, system: str, tasks: list[tuple[str, str]]
) -> None:
    """The agent's episodes under ``system``, each reported with the exact grade."""
    for task, answer in tasks:
        output = agent_answer(system, task)
        turn: dict[str, Any] = {
            "receipt": new_record_id(),
            "release_id": served_by,
            "route": "/v1/chat/completions",
            "request": {
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": task},
                ]
            },
            "response": {"choices": [{"message": {"role": "assistant", "content": output}}]},
        }
        await harness.store.append(
            SampleJoined(
                event_id=new_record_id(),
                scenario=scenario,
                occurred_at=utc_now(),
                producer="reef-join",
                report_id=new_record_id(),
                references=[turn["receipt"]],
                trajectory_json=json.dumps([turn]),
                score=exact(output, answer),
                feedback_json=json.dumps({"expected": answer}),
                metadata_json=json.dumps({"answer": answer}),
                release_ids=[served_by],
            )
        )


async def releases(harness: Harness, scenario: str) -> list[ReleaseCommitted]:
    return [
        e
        for e in await harness.events(topics.RELEASES)
        if isinstance(e, ReleaseCommitted) and e.scenario == scenario and e.sample_ids
    ]


def files(harness: Harness, content_id: str, tmp: Path) -> str:
    folder = materialise(harness.content.store, harness.content.load(content_id), tmp / "f")
    return (folder / "system_prompt.md").read_text()


async def test_a_better_child_is_published_and_a_worse_one_rejected(
    harness: Harness, running: Any, tmp_path: Path
) -> None:
    head = await seeded(harness, "s")
    chat = StandInChat()
    train = [(f"Task: {w}", w[::-1]) for w in ("otter", "maple", "quartz")]
    async with running(trainer(harness, chat, reversal(VALIDATION))) as run:
        await episodes(harness, "s", head, SEED, train)
        await until(lambda: run.progress.candidates["accepted"] == 1)
        [first] = await releases(harness, "s")
        assert files(harness, first.content_id, tmp_path) == f"{SEED}\n{RULE}\n"
        verdict = json.loads(first.evaluation_json)
        assert verdict["candidate"]["score"] == 1.0 and verdict["baseline"]["score"] < 0.5
        assert verdict["decision"]["policy"] == "gepa_strict_mean"
        metrics = json.loads(first.metrics_json)
        assert metrics["gepa.minibatch_child"] == 3.0 > metrics["gepa.minibatch_parent"]
        assert metrics["gepa.parent_served"] == 1.0 and metrics["gepa.next_component"] == 1.0

        # under the new head: one task the agent cannot solve; the reflection (asked with
        # the useless marker) drops the rule: worse on the minibatch, so nothing proposed
        system = f"{SEED}\n{RULE}"
        worse = [(f"Task: cobalt {USELESS}", "tlaboc"), ("Task: pine", "enip"), ("Task: x", "?")]
        await episodes(harness, "s", first.release_id, system, worse)
        await until(lambda: run.progress.candidates["failed"] == 1)
    last = run.progress.steps[-1]
    assert last.outcome == "training_failed"
    assert "child rejected: minibatch 0.0000 <= parent 2.0000" in (last.reason or "")
    assert [r.release_id for r in await releases(harness, "s")] == [first.release_id]
    reflections = [m for m in chat.requests if m[0]["content"].startswith("You are Reef's GEPA")]
    assert len(reflections) == 2 and "### Feedback" in reflections[0][1]["content"]


async def test_a_child_the_gate_refuses_is_kept_pending_and_rebuilt_by_replay(
    harness: Harness, running: Any
) -> None:
    head = await seeded(harness, "s")
    # validation tasks the rule does not change: the child ties there, so it is refused
    plain = [{"prompt": "hello there", "answer": "ok: hello there"}]
    first = trainer(harness, StandInChat(), plain)
    async with running(first) as run:
        await episodes(
            harness,
            "s",
            head,
            SEED,
            [(f"Task: {w}", w[::-1]) for w in ("otter", "maple", "quartz")],
        )
        await until(lambda: run.progress.proposals["pending"] == 1)
    assert run.progress.candidates == {"rejected": 1}
    [kept] = await releases(harness, "s")
    assert kept.pending and kept.parent_release_id == head
    assert "not strictly better" in json.loads(kept.evaluation_json)["decision"]["reason"]

    # a new process's recipe folds the same chain into the same archive
    again = trainer(harness, StandInChat(), plain)
    old, new = first.recipe, again.recipe
    assert isinstance(old, GEPARecipe) and isinstance(new, GEPARecipe)
    async with running(again):
        await until(lambda: "s" in new.archives and len(new.archives["s"].entries) == 3)
    assert new.archives["s"].scores() == old.archives["s"].scores()
    assert new.archives["s"].scores()[kept.content_id] == {"val/0": 1.0}
    assert [e.cursor for e in new.archives["s"].entries.values()] == [0, 0, 1]


def sample(task: str, answer: str, output: str, score: float) -> Sample:
    turn = Turn(
        "r",
        "head",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": task}]},
        {"choices": [{"message": {"role": "assistant", "content": output}}]},
    )
    return Sample(new_record_id(), "s", "rep", score, None, {"answer": answer}, (turn,), ("head",))


def test_a_parent_that_is_not_served_is_opened_from_its_release_and_rerun(
    tmp_path: Path,
) -> None:
    chat = StandInChat()
    recipe = build_recipe("gepa", config(reversal(VALIDATION)), chat=chat)
    assert isinstance(recipe, GEPARecipe)
    folders = {"seed": tmp_path / "seed", "kept": tmp_path / "kept"}
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "system_prompt.md").write_text(SEED)
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "system_prompt.md").write_text(f"{SEED}\n{RULE}\n")
    recipe.bind_contents(folders.__getitem__)
    verdict = {
        "candidate": {"metrics": {"val/0": 1.0}},
        "baseline": {"metrics": {"val/0": 0.0}},
    }
    recipe.observe_release(ReleaseFact("s", "r0", "seed", "creation"))
    recipe.observe_release(ReleaseFact("s", "r1", "kept", "training", "r0", True, {}, verdict))
    # served by the seed, but the seed is dominated: the pending child is the parent
    batch = Batch(
        "s",
        (
            (sample(f"Task: otter {USELESS}", "retto", "otter", 0.0),),
            (sample("Task: x", "?", "x", 0.0),),
        ),
    )
    with pytest.raises(CandidateRejectedError, match=r"minibatch 0\.\d+ <= parent 1\.0000"):
        recipe.produce(batch, Parent("head", "seed", folders["seed"]), tmp_path / "child")
    reruns = [m for m in chat.requests if m[0]["content"] == f"{SEED}\n{RULE}"]
    assert [m[1]["content"] for m in reruns] == [f"Task: otter {USELESS}", "Task: x"]
    shown = next(m for m in chat.requests if m[0]["content"].startswith("You are Reef's GEPA"))
    assert "the expected answer is 'retto'" in shown[1]["content"]  # the default feedback


def test_bad_configuration_and_unusable_reports_are_named() -> None:
    with pytest.raises(RecipeConfigError, match=r"recipe\.gate"):
        build_recipe("gepa", {**config(reversal(VALIDATION)), "gate": {"margin": 0.5}})
    with pytest.raises(RecipeConfigError, match=r"recipe\.evaluation"):
        build_recipe("gepa", {**config([]), "evaluation": {"grader": "exact"}})
    recipe = build_recipe("gepa", config(reversal(VALIDATION)), chat=StandInChat())
    assert recipe.usable(sample("Task: otter", "retto", "otter", 0.0)) is None
    unanswered = sample("Task: otter", "retto", "otter", 0.0)
    unanswered.metadata.clear()
    assert recipe.usable(unanswered) == "no_reference_answer"


def test_the_example_deployment_configures_gepa() -> None:
    example = Path(__file__).resolve().parents[4] / "recipes/examples/gepa.yaml"
    recipe = build_recipe("gepa", read_section(example), base_dir=example.parent)
    assert isinstance(recipe, GEPARecipe) and len(recipe.tasks) >= 4
