"""``reef demo``: shortened runs complete; the committed full run's plot and table hold up."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.registry import read_section, recipe_class
from reef.cli.demo_plans import PLANS, WordSets, write_recipe_config
from reef.settings import load_settings
from reef.testing.servers import clean_env

DOCS = Path(__file__).resolve().parents[2] / "docs"


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def scores(path: Path) -> list[float]:
    return [float(row["score"]) for row in rows(path)]


def run_demo(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "reef.cli", "demo", "--releases", "1", "--minutes", "5"]
    return subprocess.run(
        [*argv, "--out", str(out), *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_a_shortened_demo_completes_with_a_table_and_a_plot(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = run_demo(out, "--batch", "64")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "mean held-out score" in done.stdout
    png = (out / "scores.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    measured = rows(out / "scores.csv")
    assert len(measured) >= 2, measured  # the creation release and at least one trained one
    assert all(0.0 <= float(r["score"]) <= 1.0 for r in measured)
    assert [int(r["samples"]) for r in measured] == [0, 64], measured


@pytest.mark.slow
def test_a_shortened_sao_demo_trains_on_scores_alone_from_the_warm_start(tmp_path: Path) -> None:
    """``--recipe sao``: the copying warm start serves first (it scores low on "First
    letter of"), one round of 32 sampled answers reported with scores alone trains a
    release the engine then serves."""
    out = tmp_path / "demo"
    done = run_demo(out, "--recipe", "sao", "--batch", "32")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    measured = rows(out / "scores.csv")
    assert float(measured[0]["score"]) < 0.2, measured
    assert measured[0]["release_id"] != measured[1]["release_id"]
    trained_on = int(measured[1]["samples"])  # one round, or more if the gate rejected one
    assert trained_on > 0 and trained_on % 32 == 0, measured


@pytest.mark.parametrize("name", sorted(PLANS))
def test_each_plan_writes_a_config_its_recipe_accepts(tmp_path: Path, name: str) -> None:
    """The recipe's own config model validates the file ``reef serve`` gets: one round is
    one batch (a grpo unit is the group of answers to one prompt), and the gate scores
    words the agent never asks about nor is measured on."""
    plan, sets = PLANS[name], WordSets.of(11)
    path = write_recipe_config(tmp_path, plan, sets.gate, plan.prompts)
    config = recipe_class(plan.recipe).parse_config(read_section(path), base_dir=tmp_path)
    assert config.batching.batch_size == plan.prompts
    assert config.batching.group_size == plan.answers
    assert config.gate.policy == "win_margin"
    assert set(sets.train) & set(sets.gate + sets.held_out) == set()
    assert set(sets.gate) & set(sets.held_out) == set()
    assert len(sets.gate) == len(sets.held_out) == 60


@pytest.mark.parametrize("name", sorted(PLANS))
def test_each_plan_passes_reef_serve_only_settings_it_accepts(name: str) -> None:
    """A plan's extra ``reef serve`` settings are known ``REEF_*`` names with valid values
    (``openclaw_rl``: sessions tracked, the judge and its hints on, the top-K record)."""
    plan = PLANS[name]
    loaded = load_settings(environ=dict(plan.settings))
    from_env = {f"REEF_{field.upper()}" for field, src in loaded.sources.items() if src == "env"}
    assert from_env == set(plan.settings)
    if loaded.settings.judge.turns:
        assert plan.tag_sessions and loaded.settings.sessions.track
        assert loaded.settings.recording.top_logprobs > 0 and plan.record_tokens


def test_an_unknown_recipe_is_refused_with_the_choices(tmp_path: Path) -> None:
    done = run_demo(tmp_path / "out", "--recipe", "nope")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Invalid value for '--recipe'" in done.stderr
    assert "'grpo'" in done.stderr and "'sao'" in done.stderr and "'sft'" in done.stderr
    assert "'openclaw_rl'" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("option", "value"), [("--batch", "0"), ("--batch", "501"), ("--workers", "0")]
)
def test_a_batch_or_worker_count_out_of_range_is_refused(
    tmp_path: Path, option: str, value: str
) -> None:
    done = run_demo(tmp_path / "out", option, value)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"Invalid value for '{option}'" in done.stderr and "range" in done.stderr


def test_the_full_run_in_the_readme_rose_above_0_8_over_at_least_3_releases() -> None:
    png = (DOCS / "demo-scores.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    measured = rows(DOCS / "demo-scores.csv")
    values = [float(r["score"]) for r in measured]
    assert len(values) >= 4, "the creation release and at least 3 trained releases"
    assert values[0] < 0.2 and values[-1] > 0.8, values
    assert float(measured[-1]["seconds"]) < 300, measured
