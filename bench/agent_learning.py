"""The closed loop's learning problem without the loop: what sft makes of an agent's
corrections, and whether the folder copies a word from behind the agent's prompt.

``bench/agents.py`` takes minutes per round (CLI sessions, training, the gate, a hot
reload). This program asks its two questions in seconds each, on the same folder, the
same tasks and the same rendering as the gate (the probed request with the task as its
prompt, tools in the system turn, as the engine renders it):

1. **Copying.** Greedy answers to "Repeat exactly: <held-out words>" behind the agent's
   system prompt (and behind a one-word one): can the folder copy a word it never
   trained on from where the task will put it?
2. **sft.** Rounds of ``train_sft`` on the corrections of ``--per-round`` training tasks
   (the checker's corrections: the call that would have succeeded), each round from the
   previous round's weights on that round's tasks (``--accumulate``: on every task so
   far), then greedy answers to the held-out tasks, exact or not.

    .venv/bin/python -m bench.agent_learning [--cli claude] [--warm-start copy]
        [--folder F] [--per-round 24] [--rounds 3] [--steps 100] [--lr 1e-3]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.agent_loop import CLIS, task_sets
from bench.agents import (
    PROBE_PROMPT,
    ROUTES,
    WARM_STARTS,
    prepared_folder,
    probed,
    rendered_prompt,
    workdir_of,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", choices=sorted(CLIS), default="claude")
    parser.add_argument("--folder", type=Path, help="an earlier run's folder, used as is")
    parser.add_argument("--warm-start", choices=["none", *WARM_STARTS], default="copy")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--device", default="cpu", help="the warm start's device")
    parser.add_argument("--per-round", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--accumulate", action="store_true")
    parser.add_argument("--method", choices=["full", "lora"], default="full")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--held-out", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()

    import torch

    from recipes.training import SftTraining
    from trainers.backends.lora import train_sft_lora
    from trainers.backends.torch_backend import generate_greedy, train_sft

    torch.set_num_threads(args.threads)
    work = args.work or Path(tempfile.mkdtemp(prefix="reef-agent-learning-"))
    cli = CLIS[args.cli]
    workdir = workdir_of(cli, work)
    body = probed(cli, work)
    train, held_out = task_sets(300, 30)
    folder = args.folder or prepared_folder([cli], work, [workdir], [body], train, held_out, args)
    route = ROUTES[cli.name]

    def conversation(prompt: str) -> list[dict[str, str]]:
        system, user = rendered_prompt(body, route, prompt, folder)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def greedy(weights: Path, conversations: list[Any], tokens: int) -> list[str]:
        return generate_greedy(
            weights,
            conversations,
            base_model=str(folder),
            max_new_tokens=tokens,
            threads=args.threads,
        )

    measured = held_out[: args.held_out]
    pairs = [f"{t.word} {t.name.removesuffix('.txt')}" for t in measured]
    agent_system = conversation(PROBE_PROMPT)[0]["content"]
    for label, system in (("a one-word system prompt", "Hello"), ("the agent's", agent_system)):
        asked = [
            [
                {"role": "system", "content": system},
                {"role": "user", "content": f"Repeat exactly: {p}"},
            ]
            for p in pairs
        ]
        copied = sum(a.strip() == p for a, p in zip(greedy(folder, asked, 16), pairs, strict=True))
        print(
            f"copying behind {label}: {copied}/{len(pairs)} held-out word pairs exact", flush=True
        )

    asked = [conversation(t.prompt) for t in measured]

    def held_out_exact(weights: Path) -> tuple[int, list[str]]:
        answers = greedy(weights, asked, 64)
        expected = [cli.correct(t, workdir) for t in measured]
        return sum(a.strip() == e for a, e in zip(answers, expected, strict=True)), answers

    exact, answers = held_out_exact(folder)
    print(f"before training: held-out exact {exact}/{len(measured)}", flush=True)
    for task, answer in list(zip(measured, answers, strict=True))[:2]:
        print(f"  {task.prompt!r} -> {answer[:200]!r}", flush=True)
    parent: Path | None = None
    for round_no in range(args.rounds):
        first = 0 if args.accumulate else round_no * args.per_round
        tasks = train[first : (round_no + 1) * args.per_round]
        examples: list[Any] = [(conversation(t.prompt), cli.correct(t, workdir)) for t in tasks]
        out = work / f"round-{round_no}"
        shutil.rmtree(out, ignore_errors=True)
        options = SftTraining(
            base_model=str(folder),
            method=args.method,
            steps=args.steps,
            learning_rate=args.lr,
            max_length=4096,
            threads=args.threads,
            micro_batch_tokens=65536,
        )
        started = time.monotonic()
        fit = train_sft_lora if args.method == "lora" else train_sft
        metrics = fit(parent, examples, out, options)
        seconds = time.monotonic() - started
        exact, answers = held_out_exact(out)
        print(
            f"round {round_no}: {len(examples)} corrections, {args.steps} steps in {seconds:.0f}s,"
            f" loss {metrics['loss_first']:.2f} -> {metrics['loss_last']:.3f};"
            f" held-out exact {exact}/{len(measured)}",
            flush=True,
        )
        for task, answer in list(zip(measured, answers, strict=True))[:2]:
            print(f"  {task.prompt!r} -> {answer[:200]!r}", flush=True)
        parent = out


if __name__ == "__main__":
    main()
