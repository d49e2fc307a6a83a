"""Recipe configuration, eligibility, gates and graders (no torch, no log)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipes.base import Decision, Evaluation, GateConfig
from recipes.core import CoreRecipe
from recipes.errors import RecipeConfigError
from recipes.gates import decide
from recipes.registry import build_recipe, recipe_from_settings
from recipes.samples import Sample, Turn
from recipes.sft import SftRecipe
from recipes.tasks import exact
from reef.core.errors import ConfigError, ReefError
from reef.settings import Settings

TASKS = {"tasks": [{"prompt": "Return exactly: cat", "answer": "cat"}]}


def sample(
    *, score: float = 0.0, feedback: object = "", metadata: dict[str, object] | None = None
) -> Sample:
    turn = Turn(
        "r1",
        "rel",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Say cat"}]}]},
        {"choices": [{"message": {"role": "assistant", "content": "dog"}}]},
    )
    return Sample("s1", "sc", "rep", score, feedback, metadata or {}, (turn,), ("rel",))


# -- configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"batching": {"batch_sise": 3}}, "recipe.batching.batch_sise"),
        ({"batching": {"batch_size": "many"}}, "recipe.batching.batch_size"),
        ({"eligibility": {"max_staleness": -1}}, "recipe.eligibility.max_staleness"),
        ({"training": {"learning_rate": "fast"}}, "recipe.training.learning_rate"),
        ({"gate": {"policy": "sometimes"}}, "recipe.gate.policy"),
        ({"evaluation": {"grader": "vibes"}}, "recipe.evaluation.grader"),
        ({"on_stale": "force"}, "recipe.on_stale"),
        ({"learning_rate": 0.1}, "recipe.learning_rate"),
    ],
)
def test_config_errors_name_the_key(config: dict[str, object], key: str) -> None:
    with pytest.raises(RecipeConfigError, match=key.replace(".", r"\.")) as raised:
        build_recipe("sft", config)
    assert isinstance(raised.value, ConfigError) and isinstance(raised.value, ReefError)


def test_a_comparing_gate_needs_evaluation_tasks() -> None:
    with pytest.raises(RecipeConfigError, match=r"win_margin.*evaluation\.tasks"):
        build_recipe("sft", {"gate": {"policy": "win_margin"}})
    assert build_recipe("sft", {"gate": {"policy": "win_margin"}, "evaluation": TASKS})


def test_unknown_recipes_and_bad_dotted_paths_fail_at_start() -> None:
    with pytest.raises(RecipeConfigError, match="unknown recipe 'nope'"):
        build_recipe("nope")
    with pytest.raises(RecipeConfigError, match="cannot import"):
        build_recipe("no.such.module:Recipe")
    with pytest.raises(RecipeConfigError, match="not a Recipe subclass"):
        build_recipe("recipes.gates:decide")
    with pytest.raises(RecipeConfigError, match=r"recipe\.evaluation: .*tasks"):
        build_recipe("harness_evolve")  # built in; its gate needs a task set


def test_recipe_config_comes_from_the_yaml_recipe_section(tmp_path: Path) -> None:
    tasks = tmp_path / "held-out.jsonl"
    tasks.write_text(json.dumps({"prompt": "Return exactly: owl", "answer": "owl"}) + "\n")
    config = tmp_path / "deploy.yaml"
    config.write_text(
        "reef:\n  recipe: sft\n"
        "recipe:\n  batching:\n    batch-size: 4\n"
        "  evaluation:\n    tasks_file: held-out.jsonl\n"
    )
    recipe = recipe_from_settings(Settings.of(recipe="sft"), config)
    assert isinstance(recipe, SftRecipe)
    assert recipe.config.batching.batch_size == 4
    assert [t.answer for t in recipe.config.evaluation.load()] == ["owl"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("recipe:\n  batching:\n    size: 4\n")
    with pytest.raises(RecipeConfigError, match=r"recipe\.batching\.size"):
        recipe_from_settings(Settings.of(recipe="sft", recipe_config=bad))


def test_core_records_only() -> None:
    recipe = build_recipe("core")
    assert isinstance(recipe, CoreRecipe) and not recipe.trains
    assert recipe.admit(sample(score=1.0), 0) == "record_only"


# -- eligibility ----------------------------------------------------------------------


def test_eligibility_window_and_staleness() -> None:
    recipe = build_recipe(
        "sft", {"eligibility": {"min_score": 0.2, "max_score": 0.9, "max_staleness": 1}}
    )
    signal = {"correction": "cat"}
    assert recipe.admit(sample(score=0.5, feedback=signal), 0) is None
    assert recipe.admit(sample(score=0.5, feedback=signal), 1) is None
    assert recipe.admit(sample(score=0.5, feedback=signal), 2) == "stale"
    assert recipe.admit(sample(score=0.5, feedback=signal), None) == "unknown_release"
    assert recipe.admit(sample(score=0.1, feedback=signal), 0) == "score_below_min"
    assert recipe.admit(sample(score=0.95, feedback=signal), 0) == "score_above_max"


def test_sft_learns_from_corrections_and_well_scored_answers() -> None:
    recipe = build_recipe("sft")
    assert recipe.admit(sample(feedback={"correction": "cat"}), 0) is None
    assert recipe.admit(sample(metadata={"correction": "cat"}), 0) is None
    assert recipe.admit(sample(score=1.0), 0) is None  # imitates its own answer
    assert recipe.admit(sample(score=0.3, feedback="meh"), 0) == "no_training_signal"
    from recipes.sft import example_of

    example = example_of(sample(feedback={"correction": "cat"}), 1.0)
    assert isinstance(example, tuple)  # a text exchange: (conversation, target)
    messages, target = example
    assert messages == [{"role": "user", "content": "Say cat"}] and target == "cat"
    assert example_of(sample(score=1.0), 1.0) == (messages, "dog")


# -- gates ----------------------------------------------------------------------------


def ev(score: float) -> Evaluation:
    return Evaluation("test", score)


def test_gate_policies() -> None:
    assert decide(GateConfig(), ev(0.0), None).selected
    assert decide(GateConfig(policy="floor", floor=0.5), ev(0.5), None).selected
    assert not decide(GateConfig(policy="floor", floor=0.5), ev(0.4), None).selected
    win = GateConfig(policy="win_margin", margin=0.05)
    assert decide(win, ev(0.7), ev(0.6)).selected
    assert not decide(win, ev(0.62), ev(0.6)).selected
    assert not decide(GateConfig(policy="win_margin"), ev(0.6), ev(0.6)).selected  # a tie
    assert not decide(win, ev(0.9), None).selected  # nothing to compare with: closed


def always_half(candidate: Evaluation, baseline: Evaluation | None, config: GateConfig) -> bool:
    return candidate.score >= 0.5


def broken(candidate: Evaluation, baseline: Evaluation | None, config: GateConfig) -> Decision:
    raise RuntimeError("bug")


def test_custom_gates_by_dotted_path_fail_closed() -> None:
    here = "tests.unit.recipes.test_recipes"
    assert decide(GateConfig(policy=f"{here}:always_half"), ev(0.6), None).selected
    assert not decide(GateConfig(policy=f"{here}:always_half"), ev(0.4), None).selected
    failed = decide(GateConfig(policy=f"{here}:broken"), ev(0.9), None)
    assert not failed.selected and "RuntimeError: bug" in failed.reason
    missing = decide(GateConfig(policy="no.such:gate"), ev(0.9), None)
    assert not missing.selected


def test_exact_grader_gives_partial_credit() -> None:
    assert exact("cat", "cat") == 1.0
    assert exact(" Cat ", "cat") == 1.0
    assert exact("cab", "cat") == pytest.approx(0.5 * 2 / 3)
    assert exact("", "cat") == 0.0


def test_the_example_deployment_parses() -> None:
    from reef.settings import load_settings

    example = Path(__file__).resolve().parents[3] / "recipes/examples/sft-local.yaml"
    settings = load_settings({}, example, environ={}).settings
    assert settings.deployment.recipe == "sft" and settings.engine.scenario == "words"
    recipe = recipe_from_settings(settings, example)
    assert isinstance(recipe, SftRecipe)
    assert len(recipe.config.evaluation.load()) == 40


def test_claim_checked_bodies_are_resolved_for_recipes() -> None:
    from recipes.samples import sample_from_event
    from reef.core.events import SampleJoined
    from reef.core.events import utc_now as now

    request = {"messages": [{"role": "user", "content": "long prompt"}]}
    bodies = {"sha256:" + "a" * 64: json.dumps(request)}
    trajectory = [
        {
            "receipt": "r1",
            "release_id": "rel",
            "route": "/v1/chat/completions",
            "request": {"claim": "sha256:" + "a" * 64},
            "response": {"choices": [{"message": {"role": "assistant", "content": "hi"}}]},
        }
    ]
    event = SampleJoined(
        event_id="s1",
        scenario="sc",
        occurred_at=now(),
        producer="reef-join",
        report_id="rep",
        references=["r1"],
        trajectory_json=json.dumps(trajectory),
        score=0.5,
        feedback_json=json.dumps("plain text feedback"),
        metadata_json=json.dumps({"correction": "hello"}),
        release_ids=["rel"],
    )
    found = sample_from_event(event, partition=2, offset=7, resolve=bodies.__getitem__)
    turn = found.last()
    assert turn is not None and turn.messages() == [{"role": "user", "content": "long prompt"}]
    assert turn.answer() == "hi" and found.correction() == "hello"
    assert (found.partition, found.offset, found.feedback) == (2, 7, "plain text feedback")
