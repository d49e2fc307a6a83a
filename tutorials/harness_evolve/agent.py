"""The tutorial's agent: runs tasks with the harness installed in a folder, through Reef.

It is what a user's own agent does, with the published stdlib client (``reef-client``):
read the system prompt from the installed harness (Claude Code's ``CLAUDE.md``), ask
through Reef with the release it runs pinned (``x-reef-release-id``, from the install
record), grade each answer itself and, when asked to, report the score quoting the
receipt. Usage::

    python agent.py create   --url URL --scenario S
    python agent.py run      --url URL --scenario S --harness DIR --tasks FILE [--report]
    python agent.py released --url URL --scenario S --after N [--wait-s 180]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from reef_client import ReefClient

RECORD = ".reef-harness-release"


def installed(harness: Path) -> tuple[str, str]:
    """(system prompt, release id) of the harness installed in ``harness``."""
    record = dict(
        line.split(" ", 1)
        for line in (harness / RECORD).read_text().splitlines()
        if line and not line.startswith("#")
    )
    return (harness / "CLAUDE.md").read_text(), record["release_id"]


def run(client: ReefClient, args: argparse.Namespace) -> None:
    system, release = installed(Path(args.harness))
    tasks = [json.loads(line) for line in Path(args.tasks).read_text().splitlines() if line]
    scores = []
    for task in tasks:
        body: dict[str, Any] = {
            "model": args.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": task["prompt"]},
            ],
            "temperature": 0,
            "max_tokens": 32,
        }
        reply, receipt = client.inference_with_record(
            args.scenario,
            "/v1/chat/completions",
            body,
            extra_headers={"x-reef-release-id": release},
        )
        answer = (reply["choices"][0]["message"]["content"] or "").strip()
        score = 1.0 if answer.lower() == task["answer"].lower() else 0.0
        scores.append(score)
        print(f"  {task['prompt']!r:24} -> {answer!r:14} score {score:.0f}")
        if args.report:
            feedback = {"expected": task["answer"], "got": answer}
            client.report(args.scenario, {"score": score, "feedback": feedback}, references=[receipt])
    mean = sum(scores) / len(scores)
    print(f"mean score {mean:.2f} over {len(scores)} tasks (release {release[:12]})")
    if args.score_file:
        Path(args.score_file).write_text(f"{mean:.2f}\n")


def released(client: ReefClient, args: argparse.Namespace) -> None:
    """Wait until the chain has more than ``--after`` releases; show the gate's verdict."""
    deadline = time.monotonic() + args.wait_s
    headers = {"x-reef-scenario": args.scenario}
    while time.monotonic() < deadline:
        rows = client.get("/reef/harness/releases", extra_headers=headers)["releases"]
        if len(rows) > args.after:
            evaluation = rows[-1]["evaluation"]
            print(
                f"release {rows[-1]['release_id'][:12]} committed: gate score "
                f"{evaluation['candidate']['score']:.2f} vs head {evaluation['baseline']['score']:.2f}"
            )
            return
        time.sleep(1)
    print(f"no new release within {args.wait_s} s: the gate kept the head (see reef-serve.log)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["create", "run", "released"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--model", default=os.environ.get("REEF_UPSTREAM_MODEL", "stub-model"))
    parser.add_argument("--harness")
    parser.add_argument("--tasks")
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--score-file")
    parser.add_argument("--after", type=int, default=1)
    parser.add_argument("--wait-s", type=float, default=180.0)
    args = parser.parse_args()
    client = ReefClient(args.url, token=os.environ["REEF_TOKEN"], timeout_s=120)
    if args.command == "create":
        client.post("/reef/scenarios", args.scenario, {"name": args.scenario})
    elif args.command == "run":
        run(client, args)
    else:
        released(client, args)


if __name__ == "__main__":
    sys.exit(main())
