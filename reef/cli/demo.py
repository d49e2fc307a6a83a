"""``reef demo``: the whole loop on a laptop, live — serve, record, report, train, gate, release.

It starts ``reef serve`` on a fresh embedded state dir with no upstream (so the built-in
tiny engine serves), a weight recipe (``--recipe``: ``sft`` by default), its in-process
trainer and the engine's sidecar. A toy agent asks questions about pseudo-words through
Reef and a programmatic grader responds to each answer as the recipe needs it
(:mod:`reef.cli.demo_plans`: a correction for ``sft``, scores alone for ``grpo`` and
``sao``; for ``openclaw_rl`` no report but a scripted user's next turn, scored by a
scripted stand-in judge, as the live panel's task line says). Rounds run in lock step
with the trainer (:mod:`reef.cli.demo_loop`); every release the engine serves is measured
on held-out words. At the end: a table, a CSV and a PNG plot of the mean held-out score
per release, with rejected candidates marked.
"""

from __future__ import annotations

import csv
import shutil
import tempfile
from contextlib import closing
from pathlib import Path

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from reef.cli.demo_loop import Agent, Progress, deployment, learn, new_token
from reef.cli.demo_plans import PLANS, TRAIN_WORDS, Plan, WordSets

#: the score the panel calls learned
TARGET = 0.8


def panel(plan: Plan, progress: Progress) -> Table:
    trainer = progress.trainer
    candidates = trainer.get("candidates", {})
    table = Table(title=f"Reef demo: {plan.recipe}, live", show_header=False)
    table.add_row("task", plan.summary)
    if plan.note:
        table.add_row("note", plan.note)
    table.add_row("now", progress.phase)
    table.add_row("requests served", str(progress.requests))
    table.add_row("reports sent", str(progress.responses))
    table.add_row("batches trained", str(trainer.get("batches", "-")))
    table.add_row(
        "candidates accepted / rejected",
        f"{candidates.get('accepted', 0)} / {candidates.get('rejected', 0)}",
    )
    table.add_row(
        "releases (held-out score)",
        "  ".join(f"{r.release_id[:8]}={r.score:.2f}" for r in progress.releases) or "-",
    )
    return table


@click.command("demo")
@click.option(
    "--recipe",
    type=click.Choice(sorted(PLANS)),
    default="sft",
    show_default=True,
    help="The weight recipe that learns (each with its own toy task).",
)
@click.option(
    "--releases",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Stop after this many trained releases.",
)
@click.option("--minutes", default=9.0, show_default=True, help="Stop after this long anyway.")
@click.option(
    "--batch",
    type=click.IntRange(1, TRAIN_WORDS),
    help="Prompts per round (one training batch). [default: the recipe's]",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Requests the agent sends in parallel.",
)
@click.option(
    "--out", type=click.Path(path_type=Path), default=Path("reef-demo"), show_default=True
)
@click.option("--seed", default=11, show_default=True)
def demo(
    recipe: str,
    releases: int,
    minutes: float,
    batch: int | None,
    workers: int,
    out: Path,
    seed: int,
) -> None:
    """Run the loop on the built-in tiny model and show it learning (no network, no GPU)."""
    console, plan, sets = Console(), PLANS[recipe], WordSets.of(seed)
    prompts = batch or plan.prompts
    out.mkdir(parents=True, exist_ok=True)
    state, token = Path(tempfile.mkdtemp(prefix="reef-demo-")), new_token()
    try:
        with deployment(plan, sets, state, prompts=prompts, token=token, log_dir=out) as served:
            agent = Agent(served.base_url, token, plan, sets, seed=seed, workers=workers)
            with (
                closing(agent),
                Live(panel(plan, agent.progress), console=console, refresh_per_second=2) as live,
            ):
                progress = learn(
                    agent,
                    prompts=prompts,
                    done=lambda p: len(p.releases) > releases,
                    budget_s=minutes * 60,
                    on_change=lambda p: live.update(panel(plan, p)),
                )
            _finish(plan, progress, console, out)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _finish(plan: Plan, progress: Progress, console: Console, out: Path) -> None:
    table = Table("position in chain", "release", "reports", "seconds", "mean held-out score")
    with (out / "scores.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["index", "release_id", "score", "samples", "seconds", "rejected_before"])
        for index, r in enumerate(progress.releases):
            rejected = progress.rejected_after.count(index)
            writer.writerow(
                [index, r.release_id, f"{r.score:.4f}", r.samples, f"{r.seconds:.1f}", rejected]
            )
            table.add_row(
                str(index), r.release_id[:12], str(r.samples), f"{r.seconds:.0f}", f"{r.score:.3f}"
            )
    console.print(table)
    reached = progress.first_above(TARGET)
    if reached is not None:
        console.print(f"above {TARGET} after {reached.samples} reports and {reached.seconds:.0f} s")
    console.print(f"candidates rejected by the gate: {progress.rejected}")
    if plan.note:
        console.print(f"note: {plan.note}")
    _plot(plan, progress, out / "scores.png")
    console.print(f"wrote {out / 'scores.csv'} and {out / 'scores.png'}")


def _plot(plan: Plan, progress: Progress, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    scores = [r.score for r in progress.releases]
    axes.plot(range(len(scores)), scores, marker="o", label="served release")
    axes.axhline(TARGET, color="grey", linestyle="--", linewidth=0.8)
    for index in progress.rejected_after:
        axes.axvline(index - 0.5, color="red", linestyle=":", alpha=0.6)
    if progress.rejected_after:
        axes.plot([], [], color="red", linestyle=":", label="candidate rejected by the gate")
    axes.set_xticks(
        range(len(scores)), [f"{i}\n{r.samples} reports" for i, r in enumerate(progress.releases)]
    )
    axes.set_xlabel("release (in chain order) and reports sent before it")
    axes.set_ylabel("mean held-out score")
    axes.set_ylim(0, 1)
    axes.set_title(f"Reef demo ({plan.recipe}): the served model improves release by release")
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
