"""The weight recipes on the same work, in one run: ``sft``, ``grpo``, ``sao``, ``openclaw_rl``.

Each recipe gets its own ``reef serve`` (embedded log, the tiny engine, the trainer in
process) driven by ``reef demo``'s loop (:mod:`reef.cli.demo_loop`): the same toy task
("First letter of: <word>", graded with partial credit), the same warm start (the tiny
model after a short imitation warm-up on copying words: it answers with a garbled copy
of the word), the same words, gate tasks and seed. Each recipe is driven as its demo plan
says (:data:`reef.cli.demo_plans.PLANS`): ``sft`` is sent the right answer as a
correction; ``grpo`` scores alone, 8 sampled answers per prompt; ``sao`` one sampled
answer per prompt, its score alone; ``openclaw_rl`` no report at all: a scripted user
replies to each sampled answer ("thanks!" or "no, ...") in its session and a *scripted
stand-in judge* (fixed rules, no model: :mod:`reef.testing.judge_upstream`) scores the
reply, so its row measures the recipe and the plumbing, not a judge model (its "reports"
are the user's replies, each judged into one). Rounds run until the served model's
held-out score passes the target, or the round or time limit.

One row per recipe: the held-out score of every served release, the reports and wall
time (from the first round) until the score passed the target, and the candidates the
gate rejected. Another recipe is one more name in ``RECIPES`` (and its entry in PLANS).

    .venv/bin/python bench/recipes.py [--target 0.7] [--rounds 12] [--seed 11]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reef.cli.demo_loop import Agent, Progress, deployment, learn, new_token
from reef.cli.demo_plans import FIRST_LETTER, PLANS, Plan, WordSets

RECIPES = ("sft", "grpo", "sao", "openclaw_rl")


def plan_for(name: str) -> Plan:
    """The demo's plan for ``name``, on the shared task and warm start."""
    return dataclasses.replace(PLANS[name], task=FIRST_LETTER, warm_start=True)


def run(name: str, args: argparse.Namespace, work: Path) -> tuple[Progress, float]:
    plan, sets, token = plan_for(name), WordSets.of(args.seed), new_token()
    state = work / name
    state.mkdir()
    with deployment(
        plan, sets, state, prompts=plan.prompts, token=token, log_dir=work / "logs"
    ) as served:
        agent = Agent(served.base_url, token, plan, sets, seed=args.seed, workers=args.workers)
        started = time.monotonic()

        target: float = args.target
        rounds: int = args.rounds

        def done(progress: Progress) -> bool:
            last = progress.releases[-1].score if progress.releases else 0.0
            return last > target or progress.rounds >= rounds

        progress = learn(agent, prompts=plan.prompts, done=done, budget_s=args.minutes * 60)
        agent.close()
    return progress, time.monotonic() - started


def row(name: str, progress: Progress, wall_s: float, target: float) -> list[str]:
    reached = progress.first_above(target)
    scores = " ".join(f"{r.score:.2f}" for r in progress.releases)
    return [
        name,
        scores,
        str(reached.samples) if reached else f"> {progress.responses}",
        f"{reached.seconds:.0f}" if reached else f"> {wall_s:.0f}",
        str(progress.rejected),
        str(progress.rounds),
        f"{wall_s:.0f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=float, default=0.7)
    parser.add_argument("--rounds", type=int, default=12, help="Most rounds per recipe.")
    parser.add_argument("--minutes", type=float, default=10.0, help="Most time per recipe.")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--recipes", default=",".join(RECIPES))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="reef-bench-recipes-"))
    header = ["recipe", "held-out score per release", "reports to", "s to", "rejected"]
    header += ["rounds", "wall s"]
    rows = []
    try:
        for name in args.recipes.split(","):
            progress, wall_s = run(name, args, work)
            rows.append(row(name, progress, wall_s, args.target))
            print(f"{name}: done in {wall_s:.0f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\ntarget {args.target} held-out (60 words), seed {args.seed}, load average {load}")
    for name in args.recipes.split(","):
        if PLANS[name].note:
            print(f"{name}: {PLANS[name].note}")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for line in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))


if __name__ == "__main__":
    main()
