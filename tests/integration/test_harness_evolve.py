"""harness_evolve's pure parts (edit format, harness composition, config, gate) and its
upstream calls against the scripted harness upstream (a real process on loopback)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from recipes.base import Batch, Evaluation, Parent
from recipes.errors import EvaluationError, RecipeConfigError, TrainingError
from recipes.harness_edits import (
    EDIT_FORMAT,
    AppendEdit,
    EditError,
    ReplaceEdit,
    WriteEdit,
    apply_edit,
    check_path,
    compose,
    copy_harness,
    harness_files,
    parse_edit,
    system_prompt,
)
from recipes.harness_evolve import (
    PROPOSER_MARKER,
    HarnessEvolveRecipe,
    failing,
    proposer_messages,
    resolve_endpoint,
)
from recipes.registry import build_recipe, deployment_facts, recipe_from_settings
from recipes.samples import Sample, Turn
from reef.settings import Settings
from reef.testing.harness_upstream import RULE
from reef.testing.servers import UpstreamProcess, dead_url, running_upstream

PATTERNS = ["system_prompt.md", "skills/*.md", "rules/*.md"]
TASKS = [{"prompt": f"Task: {w}", "answer": w[::-1]} for w in ("otter", "maple", "quartz")]
BASE: dict[str, Any] = {
    "upstream": {"base_url": "http://127.0.0.1:9/v1", "model": "stub-model"},
    "evaluation": {"tasks": TASKS, "grader": "exact"},
}


def apply(folder: Path, edit: AppendEdit | ReplaceEdit | WriteEdit, limit: int = 999) -> str:
    return apply_edit(folder, edit, PATTERNS, max_file_chars=limit)


def harness(tmp_path: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return tmp_path


# -- the edit format -----------------------------------------------------------------------


def test_the_three_edit_shapes_parse() -> None:
    append = parse_edit('{"op": "append", "path": "rules/a.md", "text": "Be kind."}', max_chars=999)
    assert append == AppendEdit(op="append", path="rules/a.md", text="Be kind.")
    replace = parse_edit(
        '```json\n{"op": "replace", "path": "system_prompt.md", "old": "a", "new": "b",'
        ' "rationale": "why"}\n```',
        max_chars=999,
    )
    assert isinstance(replace, ReplaceEdit) and replace.rationale == "why"
    write = parse_edit('  {"op": "write", "path": "skills/x.md", "text": ""}  ', max_chars=999)
    assert isinstance(write, WriteEdit) and write.text == ""


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("I would add a rule.", "not one JSON object"),
        ('[{"op": "append"}]', "JSON list, not an object"),
        ('{"op": "append", "path": "a.md", "text": "x"} trailing', "not one JSON object"),
        ('{"op": "delete", "path": "a.md"}', "does not match any of the expected tags"),
        ('{"op": "append", "path": "a.md", "text": "x", "extra": 1}', "extra: Extra inputs"),
        ('{"op": "append", "path": "a.md"}', "append.text: Field required"),
        ('{"op": "append", "path": "a.md", "text": 3}', "append.text: Input should be a valid"),
        ('{"op": "append", "path": "a.md", "text": "x", "text": "y"}', "repeats key"),
        ('{"op": "replace", "path": "a.md", "old": "", "new": "x"}', "replace.old"),
        ('{"path": "a.md", "text": "x"}', "Unable to extract tag"),
        ('```json\n{"op": "append", "path": "a.md", "text": "x"}\n``` and more', "not one JSON"),
    ],
)
def test_anything_but_one_valid_edit_is_refused(reply: str, reason: str) -> None:
    with pytest.raises(EditError, match=reason):
        parse_edit(reply, max_chars=999)


def test_a_too_long_proposal_is_refused() -> None:
    with pytest.raises(EditError, match="characters long"):
        parse_edit(json.dumps({"op": "write", "path": "a.md", "text": "x" * 100}), max_chars=50)


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../system_prompt.md", "rules/../../x.md", "rules\\a.md", "notes.md"]
)
def test_only_harness_files_may_be_edited(path: str) -> None:
    with pytest.raises(EditError):
        check_path(path, PATTERNS)


def test_edits_apply_and_an_edit_that_changes_nothing_fails(tmp_path: Path) -> None:
    folder = harness(tmp_path, {"system_prompt.md": "Be brief."})
    assert (
        apply(folder, AppendEdit(op="append", path="system_prompt.md", text=RULE))
        == "system_prompt.md"
    )
    assert (folder / "system_prompt.md").read_text() == f"Be brief.\n{RULE}\n"
    apply(folder, AppendEdit(op="append", path="rules/new.md", text="R1"))
    assert (folder / "rules/new.md").read_text() == "R1\n"
    apply(folder, ReplaceEdit(op="replace", path="system_prompt.md", old="brief", new="kind"))
    assert (folder / "system_prompt.md").read_text().startswith("Be kind.\n")
    apply(folder, WriteEdit(op="write", path="skills/a.md", text="S"))
    assert (folder / "skills/a.md").read_text() == "S"
    with pytest.raises(EditError, match="unchanged"):
        apply(folder, WriteEdit(op="write", path="skills/a.md", text="S"))
    with pytest.raises(EditError, match="occurs 0 times"):
        apply(folder, ReplaceEdit(op="replace", path="skills/a.md", old="zz", new="y"))
    (folder / "skills/b.md").write_text("x x")
    with pytest.raises(EditError, match="occurs 2 times"):
        apply(folder, ReplaceEdit(op="replace", path="skills/b.md", old="x", new="y"))
    with pytest.raises(EditError, match="does not exist"):
        apply(folder, ReplaceEdit(op="replace", path="skills/c.md", old="x", new="y"))
    with pytest.raises(EditError, match="limit 5"):
        apply(folder, WriteEdit(op="write", path="skills/a.md", text="too long"), 5)


def test_the_prompt_is_composed_in_pattern_order(tmp_path: Path) -> None:
    files = {
        "rules/b.md": "rule b",
        "rules/a.md": "rule a\n",
        "system_prompt.md": "  main  ",
        "skills/s.md": "",
        "notes.txt": "not in the prompt",
    }
    folder = harness(tmp_path / "h", files)
    expected = "main\n\nrule a\n\nrule b"
    assert system_prompt(folder, PATTERNS) == expected
    assert compose(files, PATTERNS) == expected  # what a client does with GET /reef/harness
    assert [p for p, _ in harness_files(folder, PATTERNS)] == [
        "system_prompt.md",
        "skills/s.md",
        "rules/a.md",
        "rules/b.md",
    ]
    assert system_prompt(None, PATTERNS) == ""


def test_the_copy_of_a_read_only_parent_is_writable(tmp_path: Path) -> None:
    parent = harness(tmp_path / "parent", {"system_prompt.md": "x", "rules/a.md": "y"})
    for path in parent.rglob("*.md"):
        path.chmod(0o444)
    out = tmp_path / "out"
    copy_harness(parent, out)
    apply(out, AppendEdit(op="append", path="rules/a.md", text="z"), 99)
    assert (out / "rules/a.md").read_text() == "y\nz\n"
    assert (parent / "rules/a.md").read_text() == "y"


# -- configuration -------------------------------------------------------------------------


def test_the_config_is_strict_and_names_the_key() -> None:
    with pytest.raises(RecipeConfigError, match=r"recipe\.proposer\.max_trajectorys: Extra"):
        build_recipe("harness_evolve", {**BASE, "proposer": {"max_trajectorys": 3}})
    with pytest.raises(RecipeConfigError, match=r"recipe\.upstream\.timeout_s"):
        build_recipe("harness_evolve", {**BASE, "upstream": {"timeout_s": "soon"}})
    with pytest.raises(RecipeConfigError, match=r"recipe\.gate: .*selects only on win_margin"):
        build_recipe("harness_evolve", {**BASE, "gate": {"policy": "always"}})
    with pytest.raises(
        RecipeConfigError, match=r"recipe\.evaluation: .*tasks or tasks_file is required"
    ):
        build_recipe("harness_evolve", {"upstream": BASE["upstream"]})
    with pytest.raises(RecipeConfigError, match="drop 'system'"):
        build_recipe(
            "harness_evolve",
            {**BASE, "evaluation": {"tasks": [{**TASKS[0], "system": "s"}]}},
        )
    recipe = build_recipe("harness_evolve", {**BASE, "batching": {"batch-size": 2}})
    assert isinstance(recipe, HarnessEvolveRecipe)
    assert recipe.config.gate.policy == "win_margin" and recipe.config.batching.batch_size == 2


def test_the_endpoint_defaults_to_the_deployments_upstream(tmp_path: Path) -> None:
    config = tmp_path / "deploy.yaml"
    config.write_text("recipe:\n  evaluation:\n    tasks: [{prompt: 'Task: owl', answer: lwo}]\n")
    settings = Settings.of(
        recipe="harness_evolve",
        recipe_config=config,
        upstream_url="http://127.0.0.1:1234/v1/",
        upstream_api_key="sk-up",
        upstream_model="m1",
    )
    recipe = recipe_from_settings(settings)
    assert isinstance(recipe, HarnessEvolveRecipe) and recipe.endpoint is not None
    assert recipe.endpoint.url == "http://127.0.0.1:1234/v1/chat/completions"
    assert (recipe.endpoint.model, recipe.endpoint.api_key) == ("m1", "sk-up")
    with pytest.raises(RecipeConfigError, match="no upstream_url"):
        recipe_from_settings(Settings.of(recipe="harness_evolve", recipe_config=config))
    anthropic = settings.replace(upstream_dialect="anthropic")
    with pytest.raises(RecipeConfigError, match="speaks 'anthropic'"):
        recipe_from_settings(anthropic)
    no_model = settings.replace(upstream_model=None)
    with pytest.raises(RecipeConfigError, match=r"recipe\.upstream\.model"):
        recipe_from_settings(no_model)
    recipe = build_recipe("harness_evolve", {**BASE, "upstream": {"api_key_env": "NOPE_X"}})
    with pytest.raises(RecipeConfigError, match=r"\$NOPE_X is not set"):
        resolve_endpoint(recipe.config.upstream, deployment_facts(settings))


def test_the_recipe_imports_no_training_library() -> None:
    check = (
        "import sys; from recipes.registry import build_recipe; "
        f"build_recipe('harness_evolve', {BASE!r}); "
        "print(','.join(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == ""


# -- the gate ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidate", "head", "margin", "selected"),
    [
        (1.0, 0.0, 0.5, True),
        (0.75, 0.25, 0.5, True),
        (0.7, 0.25, 0.5, False),
        (0.5, 0.5, 0.0, False),
        (0.2, 0.6, 0.0, False),
        (0.6, 0.5, 0.0, True),
    ],
)
def test_the_gate_selects_only_on_a_win_margin(
    candidate: float, head: float, margin: float, selected: bool
) -> None:
    recipe = build_recipe("harness_evolve", {**BASE, "gate": {"margin": margin}})
    decision = recipe.select(Evaluation("h", candidate), Evaluation("h", head))
    assert decision.selected is selected, decision
    assert decision.policy == "win_margin"
    assert not recipe.select(Evaluation("h", 1.0), None).selected  # no baseline: closed


# -- against the scripted harness upstream -------------------------------------------------


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    with running_upstream(
        tmp_path_factory.mktemp("harness-upstream"), module="reef.testing.harness_upstream"
    ) as process:
        yield process


def sample(word: str, answer: str, score: float, suffix: str = "") -> Sample:
    request = {
        "model": "stub-model",
        "messages": [
            {"role": "system", "content": "Answer with one word."},
            {"role": "user", "content": f"Task: {word}{suffix}"},
        ],
    }
    response = {"choices": [{"message": {"role": "assistant", "content": answer}}]}
    turn = Turn("r-" + word, "rel-0", "/v1/chat/completions", request, response)
    return Sample(
        f"s-{word}", "sc", f"rep-{word}", score, {"expected": word[::-1]}, {}, (turn,), ("rel-0",)
    )


def test_the_proposer_sees_the_harness_the_failures_and_the_format() -> None:
    recipe = build_recipe("harness_evolve", {**BASE, "proposer": {"max_message_chars": 100}})
    long = sample("otter" + "x" * 300, "otter", 0.0)
    system, user = proposer_messages([], [long], 5, recipe.config)
    assert system["content"].startswith(PROPOSER_MARKER)
    assert EDIT_FORMAT in system["content"] and "rules/*.md" in system["content"]
    assert "(the harness is empty: create a file)" in user["content"]
    assert "1 shown, batch of 5" in user["content"] and "[…" in user["content"]
    assert '[feedback] {"expected": ' in user["content"]


def live(stand_in: UpstreamProcess, **extra: Any) -> HarnessEvolveRecipe:
    config = {**BASE, "upstream": {"base_url": stand_in.v1_url, "model": "stub-model"}, **extra}
    recipe = build_recipe("harness_evolve", config)
    assert isinstance(recipe, HarnessEvolveRecipe)
    return recipe


def test_a_proposed_fix_is_applied_and_wins_the_paired_evaluation(
    stand_in: UpstreamProcess, tmp_path: Path
) -> None:
    recipe = live(stand_in)
    parent = harness(tmp_path / "head", {"system_prompt.md": "Answer with one word."})
    samples = (sample("otter", "otter", 0.0), sample("cedar", "radec", 1.0))
    assert [s.sample_id for s in failing(samples, recipe.config.proposer)] == ["s-otter"]
    batch = Batch("sc", tuple((s,) for s in samples))
    candidate = recipe.produce(batch, Parent("rel-0", "c0", parent), tmp_path / "cand")
    assert RULE in (candidate.folder / "system_prompt.md").read_text()
    assert (parent / "system_prompt.md").read_text() == "Answer with one word."
    assert candidate.metrics["failing_samples"] == 1.0
    proposal = stand_in.requests(contains=PROPOSER_MARKER)[-1]["body"]
    assert proposal["temperature"] == 0
    assert "[user] Task: otter" in proposal["messages"][1]["content"]
    assert "Task: cedar" not in proposal["messages"][1]["content"]  # passing: not shown

    head = recipe.evaluate(parent)
    new = recipe.evaluate(candidate.folder)
    assert head.score < 0.2 and head.metrics["passed"] == 0.0  # exact's partial credit
    assert new.score == 1.0
    assert new.metrics == {
        "mean_score": 1.0,
        "tasks": 3.0,
        "passed": 3.0,
        "system_prompt_chars": float(len(system_prompt(candidate.folder, PATTERNS))),
    }
    assert recipe.evaluate(candidate.folder) == new  # deterministic: same verdict again
    assert recipe.select(new, head).selected


def test_a_useless_edit_ties_and_is_rejected(stand_in: UpstreamProcess, tmp_path: Path) -> None:
    recipe = live(stand_in)
    parent = harness(tmp_path / "head", {"system_prompt.md": "Answer with one word."})
    batch = Batch("sc", ((sample("otter", "otter", 0.0, " __propose_useless__"),),))
    candidate = recipe.produce(batch, Parent("rel-0", "c0", parent), tmp_path / "cand")
    assert (candidate.folder / "rules/style.md").read_text() == "Keep answers short.\n"
    decision = recipe.select(recipe.evaluate(candidate.folder), recipe.evaluate(parent))
    assert not decision.selected and "gain +0.0000" in decision.reason


def test_malformed_proposals_and_broken_upstreams_fail_closed(
    stand_in: UpstreamProcess, tmp_path: Path
) -> None:
    recipe = live(stand_in)
    parent = Parent("rel-0", "c0", harness(tmp_path / "head", {"system_prompt.md": "x"}))
    malformed = Batch("sc", ((sample("otter", "otter", 0.0, " __propose_malformed__"),),))
    with pytest.raises(EditError, match="not one JSON object"):
        recipe.produce(malformed, parent, tmp_path / "c1")
    passing = Batch("sc", ((sample("cedar", "radec", 1.0),),))
    with pytest.raises(TrainingError, match="nothing to fix"):
        recipe.produce(passing, parent, tmp_path / "c2")

    broken = build_recipe(
        "harness_evolve", {**BASE, "upstream": {"base_url": dead_url(), "model": "m"}}
    )
    with pytest.raises(EvaluationError, match="ConnectError"):
        broken.evaluate(parent.folder)
    with pytest.raises(TrainingError, match="proposer"):
        broken.produce(Batch("sc", ((sample("otter", "otter", 0.0),),)), parent, tmp_path / "c3")

    failing_grader = live(stand_in, evaluation={"tasks": TASKS, "grader": "json:loads"})
    with pytest.raises(EvaluationError, match="grader failed"):
        failing_grader.evaluate(parent.folder)


def test_the_example_deployment_parses() -> None:
    from reef.settings import load_settings

    example = Path(__file__).resolve().parents[2] / "recipes/examples/harness-evolve.yaml"
    settings = load_settings({}, example, environ={}).settings
    assert (
        settings.deployment.recipe == "harness_evolve" and settings.deployment.seed_dir is not None
    )
    recipe = recipe_from_settings(settings, example)
    assert isinstance(recipe, HarnessEvolveRecipe) and len(recipe.tasks) == 8
    assert recipe.endpoint is not None and recipe.endpoint.url.endswith("/v1/chat/completions")
    seed = (
        settings.deployment.seed_dir
        if settings.deployment.seed_dir.is_absolute()
        else example.parents[2] / settings.deployment.seed_dir
    )
    assert RULE not in system_prompt(seed, recipe.config.harness.files)  # the seed fails
