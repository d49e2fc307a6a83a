"""The pure decisions of ``gepa``: fronts, the seeded parent draw, the two strict
acceptances, the component cursor, the archive fold and the reflection's answer."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from recipes.errors import TrainingError
from recipes.gates import Evaluation
from recipes.gepa.archive import Archive
from recipes.gepa.method import accept_child, all_perfect, next_component, publish
from recipes.gepa.pareto import draw_parent, fronts, weights
from recipes.gepa.reflection import read_rewrite
from recipes.releases import ReleaseFact

SCORES = {
    "a": {"t1": 1.0, "t2": 0.0, "t3": 0.5},
    "b": {"t1": 1.0, "t2": 1.0, "t3": 0.0},
    "c": {"t1": 0.0, "t2": 0.0, "t3": 1.0},
    "d": {"t1": 1.0, "t2": 0.0, "t3": 0.0},
}
#: the draws for seed 0, steps "step-0" .. "step-11" (recorded once; must never change)
SEED_0 = ["b", "b", "c", "c", "b", "c", "b", "b", "b", "b", "b", "b"]


def test_a_front_holds_every_candidate_with_the_best_score_of_its_task() -> None:
    assert fronts(SCORES) == {
        "t1": frozenset("abd"),
        "t2": frozenset("b"),
        "t3": frozenset("c"),
    }


def test_candidates_whose_fronts_another_covers_are_never_drawn() -> None:
    # a and d sit only on t1, which b also holds besides t2: dominated
    assert weights(SCORES) == {"b": 2, "c": 1}
    # equal front sets dominate neither
    assert weights({"x": {"t": 1.0}, "y": {"t": 1.0}}) == {"x": 1, "y": 1}
    assert draw_parent({}, seed=0, key="k") is None


def test_the_parent_sequence_of_a_seed_is_fixed_and_resumes_mid_way() -> None:
    draws = [draw_parent(SCORES, seed=0, key=f"step-{i}") for i in range(12)]
    assert draws == SEED_0
    # a restarted process redoing steps 6.. draws the same parents: no generator state
    assert [draw_parent(SCORES, seed=0, key=f"step-{i}") for i in range(6, 12)] == SEED_0[6:]
    other = [draw_parent(SCORES, seed=1, key=f"step-{i}") for i in range(12)]
    assert other != draws


def test_parents_are_drawn_in_proportion_to_the_fronts_they_hold() -> None:
    counts = Counter(draw_parent(SCORES, seed=7, key=str(i)) for i in range(3000))
    assert set(counts) == {"b", "c"}
    assert 1.8 < counts["b"] / counts["c"] < 2.2


def test_a_child_that_ties_or_loses_on_the_minibatch_is_rejected() -> None:
    assert not accept_child([0.0, 1.0], [1.0, 0.0]).accepted  # a tie
    assert "a tie" in accept_child([0.5], [0.5]).reason
    assert not accept_child([1.0, 0.5], [0.5, 0.5]).accepted
    assert accept_child([0.0, 0.5], [0.0, 0.75]).accepted


def test_only_a_strictly_better_validation_mean_publishes() -> None:
    served = Evaluation("gepa:exact", 0.5)
    assert publish(Evaluation("gepa:exact", 0.75), served).selected
    assert not publish(Evaluation("gepa:exact", 0.5), served).selected
    assert not publish(Evaluation("gepa:exact", 0.25), served).selected
    assert not publish(Evaluation("gepa:exact", 1.0), None).selected


def test_components_are_rewritten_round_robin_in_sorted_order() -> None:
    paths = ["system_prompt.md", "rules/b.md", "rules/a.md"]
    order = []
    cursor = 0
    for _ in range(4):
        path, cursor = next_component(paths, cursor)
        order.append(path)
    assert order == ["rules/a.md", "rules/b.md", "system_prompt.md", "rules/a.md"]
    assert all_perfect([1.0, 1.0], 1.0) and not all_perfect([1.0, 0.9], 1.0)
    assert not all_perfect([], 1.0)


def fact(
    release: str,
    content: str,
    parent: str | None = None,
    *,
    operation: str = "training",
    pending: bool = False,
    metrics: dict[str, Any] | None = None,
    evaluation: dict[str, Any] | None = None,
) -> ReleaseFact:
    return ReleaseFact(
        "s", release, content, operation, parent, pending, metrics or {}, evaluation or {}
    )


def gate(candidate: list[float], baseline: list[float]) -> dict[str, Any]:
    def scored(values: list[float]) -> dict[str, Any]:
        return {"metrics": {f"val/{i}": v for i, v in enumerate(values)} | {"tasks": 2.0}}

    return {"candidate": scored(candidate), "baseline": scored(baseline)}


def test_the_archive_is_a_fold_of_the_chain_that_replay_rebuilds() -> None:
    chain = [
        fact("r0", "seed", operation="creation"),
        fact("r1", "k1", "r0", metrics={"gepa.next_component": 1}, evaluation=gate([1, 0], [0, 0])),
        fact("r2", "k2", "r1", pending=True, evaluation=gate([0, 1], [1, 0])),
        fact("r3", "seed", "r1", operation="rollback"),  # known content: nothing new
        fact("r4", "edit", "r3"),  # an operator's edit: a new, unscored candidate
    ]
    archive = Archive()
    for item in chain:
        archive.observe(item)
    assert list(archive.entries) == ["seed", "k1", "k2", "edit"]
    assert archive.scores() == {
        "seed": {"val/0": 0.0, "val/1": 0.0},  # from the first gate's baseline
        "k1": {"val/0": 1.0, "val/1": 0.0},
        "k2": {"val/0": 0.0, "val/1": 1.0},  # pending: a candidate all the same
    }
    assert archive.entries["k1"].cursor == 1 and archive.entries["seed"].cursor == 0

    replayed = Archive()
    for item in chain + chain:  # the whole chain again, as after a restart: no change
        replayed.observe(item)
    assert replayed.scores() == archive.scores()
    assert list(replayed.entries) == list(archive.entries)


def test_the_reflections_last_fenced_block_is_the_new_text() -> None:
    reply = "Thinking...\n```\ndraft\n```\nBetter:\n```md\nAnswer reversed.\n```\n"
    assert read_rewrite(reply, "old", max_chars=100) == "Answer reversed.\n"
    assert read_rewrite("Plain text", "old", max_chars=100) == "Plain text\n"
    for bad in ("```\n```", "```\nold\n```", "x" * 101):
        with pytest.raises(TrainingError):
            read_rewrite(bad, "old", max_chars=100)
