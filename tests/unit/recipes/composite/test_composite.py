"""``composite``: the per-part rule, the release layout and the recipe (no torch, no log).

The weights part trains through a lookup backend (a "model" is a JSON table prompt →
answer: training writes the corrections into the parent's table, decoding looks the
prompt up), the harness part asks the scripted stand-in in-process
(:class:`reef.testing.harness_upstream.StandInChat`: its agent reverses the word of
``Task: <word>`` only under a harness carrying the rule).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from recipes.base import Batch, Decision, Evaluation, Parent
from recipes.composite.recipe import CompositeRecipe
from recipes.composite.rule import (
    PartScore,
    PartVerdict,
    combine,
    judge,
    release_decision,
    split,
)
from recipes.errors import CandidateRejectedError, RecipeConfigError, TrainingError
from recipes.registry import build_recipe, recipe_class
from recipes.samples import Sample, Turn
from recipes.training import Conversation, Example, SftTraining
from reef.artifacts.parts import (
    PARTS_FILE,
    folder_content_id,
    harness_part,
    weights_folder,
    write_marker,
)
from reef.core.ids import EMPTY_CONTENT_ID
from reef.testing.harness_upstream import RULE, USELESS, StandInChat

WORDS = ["otter", "maple"]
TASKS = [{"prompt": f"Task: {w}", "answer": w[::-1]} for w in WORDS]


# -- the rule -------------------------------------------------------------------------


def scored(content_id: str, score: float) -> PartScore:
    return PartScore(content_id, Evaluation("e", score, {"mean_score": score}))


def wins(candidate: Evaluation, served: Evaluation) -> Decision:
    return Decision(candidate.score > served.score, "win", f"{candidate.score} vs {served.score}")


def always(candidate: Evaluation, served: Evaluation) -> Decision:
    return Decision(True, "always", "always selects")


GATES = {"harness": wins, "weights": wins}


def test_each_part_is_judged_by_its_own_gate_against_the_served_part() -> None:
    served = {"harness": scored("h0", 0.2), "weights": scored("w0", 0.5)}
    candidate = {"harness": scored("h1", 1.0), "weights": scored("w1", 0.1)}
    verdicts = judge(candidate, served, GATES)
    assert verdicts == [
        PartVerdict("harness", True, True, "1.0 vs 0.2"),
        PartVerdict("weights", True, False, "0.1 vs 0.5"),
    ]
    # a refused part may not ride along: this candidate as it is is not released
    assert not release_decision(verdicts).selected


def test_an_unchanged_part_is_kept_whatever_its_gate_says() -> None:
    served = {"harness": scored("h0", 0.2), "weights": scored("w0", 0.5)}
    candidate = {"harness": scored("h1", 1.0), "weights": scored("w0", 0.5)}
    verdicts = judge(candidate, served, {"harness": wins, "weights": always})
    assert verdicts[1] == PartVerdict("weights", False, False, "unchanged")
    decision = release_decision(verdicts)
    assert decision.selected and decision.policy == "composite"
    assert decision.reason == (
        "harness: taken (1.0 vs 0.2); weights: the served part is kept (unchanged)"
    )


@pytest.mark.parametrize(
    ("verdicts", "selected"),
    [
        ([PartVerdict("h", True, True, ""), PartVerdict("w", True, True, "")], True),
        ([PartVerdict("h", True, True, ""), PartVerdict("w", False, False, "")], True),
        ([PartVerdict("h", False, False, ""), PartVerdict("w", False, False, "")], False),
        ([PartVerdict("h", True, False, ""), PartVerdict("w", False, False, "")], False),
        ([PartVerdict("h", True, True, ""), PartVerdict("w", True, False, "")], False),
    ],
)
def test_a_release_needs_a_taken_part_and_no_refused_one(
    verdicts: list[PartVerdict], selected: bool
) -> None:
    assert release_decision(verdicts).selected is selected


def test_a_combined_evaluation_splits_back_into_its_parts() -> None:
    parts = {"harness": scored("h", 1.0), "weights": scored("w", 0.5)}
    combined = combine(parts)
    assert combined.score == 0.75
    assert combined.metrics["harness/score"] == 1.0
    assert combined.metrics["weights/mean_score"] == 0.5
    assert split(combined) == parts


# -- the layout ---------------------------------------------------------------------------


def test_readers_take_their_part_of_a_composite_release(tmp_path: Path) -> None:
    plain = {"system_prompt.md": "be brief", "config.json": "{}"}
    assert harness_part(plain) == plain
    composite = {
        PARTS_FILE: "{}",
        "harness/system_prompt.md": "be brief",
        "weights/config.json": "{}",
    }
    assert harness_part(composite) == {"system_prompt.md": "be brief"}

    assert weights_folder(None) is None
    assert weights_folder(tmp_path) == tmp_path  # a plain release is the weights
    write_marker(tmp_path, ["harness"])
    assert weights_folder(tmp_path) is None  # composite without weights: the base model
    (tmp_path / "weights").mkdir()
    assert weights_folder(tmp_path) == tmp_path / "weights"


def test_a_part_content_id_is_what_the_part_would_have_as_a_release(tmp_path: Path) -> None:
    assert folder_content_id(None) == EMPTY_CONTENT_ID
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.md").write_text("x")
    copy = tmp_path / "b"
    copy.mkdir()
    (copy / "x.md").write_text("x")
    assert folder_content_id(tmp_path / "a") == folder_content_id(copy)
    (copy / "x.md").write_text("y")
    assert folder_content_id(tmp_path / "a") != folder_content_id(copy)


# -- the recipe -------------------------------------------------------------------------------


class LookupBackend:
    """A "model" is ``model.json``: prompt → answer; training writes the corrections."""

    def __init__(self) -> None:
        self.decoded = 0

    def check_device(self, device: str) -> None:
        pass

    def train_sft(
        self, parent: Path | None, examples: Sequence[Example], out_dir: Path, options: SftTraining
    ) -> dict[str, float]:
        table = _table(parent)
        pairs = [e for e in examples if isinstance(e, tuple)]  # text exchanges only here
        table.update({conversation[-1]["content"]: target for conversation, target in pairs})
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "model.json").write_text(json.dumps(table, sort_keys=True))
        return {"examples": float(len(examples))}

    def train_sft_lora(self, *args: Any) -> dict[str, float]:
        raise AssertionError("not used")

    def train_grpo(self, *args: Any) -> dict[str, float]:
        raise AssertionError("not used")

    def generate_greedy(
        self,
        folder: Path | None,
        conversations: Sequence[Conversation],
        *,
        base_model: str,
        max_new_tokens: int,
        threads: int = 1,
        device: str = "cpu",
        dtype: str = "auto",
    ) -> list[str]:
        self.decoded += len(conversations)
        table = _table(folder)
        return [table.get(c[-1]["content"], "") for c in conversations]


def _table(folder: Path | None) -> dict[str, str]:
    if folder is None:
        return {}
    found: dict[str, str] = json.loads((folder / "model.json").read_text())
    return found


def section(**weights_gate: Any) -> dict[str, Any]:
    return {
        "batching": {"batch_size": len(WORDS)},
        "weights": {
            "recipe": "sft",
            "evaluation": {"tasks": TASKS},
            "gate": {"policy": "win_margin", **weights_gate},
        },
        "harness": {
            "upstream": {"base_url": "http://stand-in.invalid/v1", "model": "stub"},
            "evaluation": {"tasks": TASKS},
        },
    }


def composite(backend: LookupBackend, chat: StandInChat) -> CompositeRecipe:
    recipe = build_recipe("composite", section(), backend=backend, chat=chat)
    assert isinstance(recipe, CompositeRecipe)
    return recipe


def batch(*, correct: bool, note: str = "") -> Batch:
    """The agent answered each word as it is (score 0); the report corrects it to the
    reversed word (``correct``), or "corrects" it to the word itself (worse)."""
    samples = []
    for word in WORDS:
        turn = Turn(
            f"rec-{word}",
            "rel",
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": f"Task: {word}"}]},
            {"choices": [{"message": {"role": "assistant", "content": word}}]},
        )
        feedback = {"correction": word[::-1] if correct else word, "note": note}
        samples.append(Sample(f"s-{word}", "sc", "rep", 0.0, feedback, {}, (turn,), ("rel",)))
    return Batch("sc", tuple((s,) for s in samples))


def release(recipe: CompositeRecipe, b: Batch, parent: Path | None, out: Path) -> Decision:
    """Produce, then the trainer's gate: the candidate and the parent, evaluated."""
    candidate = recipe.produce(b, Parent("r", "c", parent), out)
    return recipe.select(recipe.evaluate(candidate.folder), recipe.evaluate(parent))


def test_composite_is_built_in_with_a_section_per_part() -> None:
    assert recipe_class("composite") is CompositeRecipe


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gate": {"policy": "always"}}, "each part has its own"),
        ({"weights": {"recipe": "grpo"}}, r"recipe\.weights\.recipe"),
        ({"weights": {"batching": {"batch_size": 2}}}, "set on the composite recipe"),
        ({"harness": {"evaluation": {"tasks": TASKS}, "gate": {"policy": "always"}}}, "harness"),
    ],
)
def test_a_bad_composite_configuration_fails_at_start(change: dict[str, Any], message: str) -> None:
    data = section()
    for key, value in change.items():
        data[key] = {**data.get(key, {}), **value} if key in ("weights", "harness") else value
    with pytest.raises(RecipeConfigError, match=message):
        build_recipe("composite", data, backend=LookupBackend(), chat=StandInChat())


def test_a_worse_weights_part_is_refused_while_a_better_harness_part_is_released(
    tmp_path: Path,
) -> None:
    backend, chat = LookupBackend(), StandInChat()
    recipe = composite(backend, chat)

    # 1: better weights, a useless harness edit: the weights are taken, the harness not
    first = tmp_path / "r1"
    decision = release(recipe, batch(correct=True, note=USELESS), None, first)
    assert decision.selected, decision
    assert "weights: taken" in decision.reason
    assert "harness: the served part is kept (unchanged)" in decision.reason
    assert json.loads((first / PARTS_FILE).read_text()) == {"parts": ["weights"]}
    assert not (first / "harness").exists()  # the served (empty) harness

    # 2: worse weights, the fixing harness edit: the harness is taken over the served weights
    second = tmp_path / "r2"
    candidate = recipe.produce(batch(correct=False), Parent("r1", "c1", first), second)
    assert candidate.metrics["weights/taken"] == 0.0
    assert candidate.metrics["weights/candidate_score"] < candidate.metrics["weights/served_score"]
    assert candidate.metrics["harness/taken"] == 1.0
    assert (second / "weights" / "model.json").read_bytes() == (
        first / "weights" / "model.json"
    ).read_bytes()
    assert RULE in (second / "harness" / "system_prompt.md").read_text()
    assert json.loads((second / PARTS_FILE).read_text()) == {"parts": ["harness", "weights"]}

    # the trainer's gate re-judges the composed candidate from remembered evaluations
    decoded, asked = backend.decoded, len(chat.requests)
    decision = recipe.select(recipe.evaluate(second), recipe.evaluate(first))
    assert (backend.decoded, len(chat.requests)) == (decoded, asked)
    assert decision.selected, decision
    assert decision.reason.startswith("harness: taken")
    assert decision.reason.endswith("weights: the served part is kept (unchanged)")


def test_a_candidate_with_no_part_taken_proposes_nothing(tmp_path: Path) -> None:
    recipe = composite(LookupBackend(), StandInChat())
    first = tmp_path / "r1"
    assert release(recipe, batch(correct=True, note=USELESS), None, first).selected
    with pytest.raises(CandidateRejectedError, match="no part passed its gate") as refused:
        recipe.produce(
            batch(correct=False, note=USELESS), Parent("r1", "c1", first), tmp_path / "x"
        )
    assert "weights: refused, the served part is kept" in str(refused.value)
    assert "harness: refused, the served part is kept" in str(refused.value)


def test_a_plain_release_cannot_be_a_composite_parent(tmp_path: Path) -> None:
    (tmp_path / "system_prompt.md").write_text("be brief")
    recipe = composite(LookupBackend(), StandInChat())
    with pytest.raises(TrainingError, match="not a composite release"):
        recipe.produce(batch(correct=True), Parent("r0", "c0", tmp_path), tmp_path / "out")
