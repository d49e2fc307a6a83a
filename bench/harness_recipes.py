"""``gepa`` against ``harness_evolve`` on the same harness tasks, in one run.

Each recipe gets its own ``reef serve`` (embedded log, trainer inside) in front of the
same scripted stand-in (:mod:`reef.testing.harness_upstream`: its agent reverses the word
of ``Task: <word>`` only under a harness carrying the rule; it also plays
``harness_evolve``'s proposer and ``gepa``'s reflector), the same seed harness, the same
validation (gate) tasks and the same rounds, driven through the HTTP API:

1. the agent works on training tasks under the seed and reports each grade;
2. under the head, a batch whose feedback leads each recipe to a useless or harmful
   change (the stand-in's ``__propose_useless__``) plus one task nobody can solve.

After each round the trainer's decision is awaited and the held-out tasks (never
reported) are run under the head. One row per head: held-out score, the recipe's own
model calls so far (episodes on tasks, and proposals or reflections) and wall time.
The stand-in is scripted: this compares the loops' costs and decisions, not the methods'
quality on real models.

    .venv/bin/python bench/harness_recipes.py
"""

from __future__ import annotations

import json
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipes.gepa.reflection import REFLECTION_MARKER
from recipes.harness_edits import compose
from recipes.harness_evolve import PROPOSER_MARKER
from recipes.tasks import exact
from reef.testing.harness_upstream import USELESS
from reef.testing.servers import UpstreamProcess, running_reef, running_upstream

PATTERNS = ["system_prompt.md", "skills/*.md", "rules/*.md"]
SEED = "You are a careful assistant.\nAnswer each task with a single word and nothing else.\n"
VALIDATION = ["lantern", "pebble", "harbor", "violet"]
TRAIN = ["otter", "maple", "quartz"]
HELD_OUT = ["falcon", "copper", "tundra", "walnut", "saffron"]
ROUNDS: list[tuple[str, list[tuple[str, str]]]] = [
    ("failures under the seed", [(f"Task: {w}", w[::-1]) for w in TRAIN]),
    (
        "useless-change bait",
        [(f"Task: {w} {USELESS}", w[::-1]) for w in TRAIN[:2]] + [("Task: x", "unreachable")],
    ),
]
COMMON = f"""
  batching: {{batch-size: {len(TRAIN)}}}
  upstream: {{model: stub-model, seed: 0}}
  harness: {{files: {json.dumps(PATTERNS)}}}
  evaluation: {{tasks-file: validation.jsonl, grader: exact, max-new-tokens: 32}}
"""
CONFIGS = {
    "harness_evolve": COMMON + "  gate: {margin: 0.25}\n",
    "gepa": COMMON + "  gepa: {seed: 0, answer-key: answer}\n",
}


@dataclass
class Row:
    recipe: str
    after: str
    release: str
    decision: str
    held_out: float
    episodes: int
    proposals: int
    wall_s: float


class Loop:
    """One recipe's deployment, driven as an agent and a grader would."""

    def __init__(self, base_url: str, token: str, upstream: UpstreamProcess) -> None:
        self.base_url = base_url
        self.token = token
        self.upstream = upstream
        self.agent_calls = 0
        self.scenario = f"bench-{secrets.token_hex(4)}"

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}", "x-reef-scenario": self.scenario}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=60.0)

    def harness(self) -> dict[str, Any]:
        with self.client() as client:
            body: dict[str, Any] = client.get("/reef/harness").raise_for_status().json()
        return body

    def episodes(self, tasks: list[tuple[str, str]]) -> list[tuple[str, float, str]]:
        """(answer, grade, receipt) per task, under the served harness."""
        system = compose(self.harness()["files"], PATTERNS)
        out = []
        with self.client() as client:
            for task, answer in tasks:
                body = {
                    "model": "stub-model",
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": task},
                    ],
                    "temperature": 0,
                }
                response = client.post("/v1/chat/completions", json=body).raise_for_status()
                text = response.json()["choices"][0]["message"]["content"] or ""
                out.append(
                    (answer, exact(text, answer), response.headers["x-reef-agent-record-id"])
                )
        self.agent_calls += len(tasks)
        return out

    def held_out(self) -> float:
        graded = self.episodes([(f"Task: {w}", w[::-1]) for w in HELD_OUT])
        return sum(g for _, g, _ in graded) / len(graded)

    def report(self, tasks: list[tuple[str, str]]) -> None:
        with self.client() as client:
            for answer, grade, receipt in self.episodes(tasks):
                body = {
                    "score": grade,
                    "feedback": {"expected": answer},
                    "metadata": {"answer": answer},
                    "references": [receipt],
                }
                client.post("/reef/report", json=body).raise_for_status()

    def candidates(self) -> dict[str, int]:
        with self.client() as client:
            status = client.get("/reef/status").raise_for_status().json()["trainer"]
        if status.get("error"):
            raise RuntimeError(f"the trainer failed: {status['error']}")
        return dict(status["candidates"])

    def decided(self, before: dict[str, int], timeout: float = 180.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            grown = [k for k, v in self.candidates().items() if v > before.get(k, 0)]
            if grown:
                return grown[0]
            time.sleep(0.2)
        raise RuntimeError("no trainer decision")

    def recipe_calls(self) -> tuple[int, int]:
        """(episodes, proposals or reflections) the recipe asked the models for so far."""
        seen = self.upstream.requests(limit=10_000)
        proposals = sum(
            1 for r in seen if PROPOSER_MARKER in r["raw"] or REFLECTION_MARKER in r["raw"]
        )
        return len(seen) - self.agent_calls - proposals, proposals


def run(recipe: str, work: Path) -> list[Row]:
    work.mkdir(parents=True)
    seed = work / "seed"
    seed.mkdir()
    (seed / "system_prompt.md").write_text(SEED)
    (work / "validation.jsonl").write_text(
        "".join(json.dumps({"prompt": f"Task: {w}", "answer": w[::-1]}) + "\n" for w in VALIDATION)
    )
    (work / "recipe.yaml").write_text("recipe:" + CONFIGS[recipe])
    token = f"reef-bench-{secrets.token_hex(6)}"
    with running_upstream(work / "upstream", module="reef.testing.harness_upstream") as upstream:
        env = {
            "REEF_TOKEN": token,
            "REEF_UPSTREAM_URL": upstream.v1_url,
            "REEF_UPSTREAM_DIALECT": "openai",
            "REEF_UPSTREAM_API_KEY": "sk-stand-in",
            "REEF_RECIPE": recipe,
            "REEF_RECIPE_CONFIG": str(work / "recipe.yaml"),
            "REEF_SEED_DIR": str(seed),
        }
        with running_reef(env=env, state_dir=work / "state", timeout=240.0) as reef:
            loop = Loop(reef.base_url, token, upstream)
            with httpx.Client(headers={"Authorization": f"Bearer {token}"}) as client:
                client.post(f"{reef.base_url}/reef/scenarios", json={"name": loop.scenario})
            started = time.monotonic()
            head = loop.harness()["release_id"]
            rows = [Row(recipe, "seed", head[:8], "-", loop.held_out(), 0, 0, 0.0)]
            for name, tasks in ROUNDS:
                before = loop.candidates()
                loop.report(tasks)
                decision = loop.decided(before)
                episodes, proposals = loop.recipe_calls()
                head = loop.harness()["release_id"]
                elapsed = time.monotonic() - started
                held = loop.held_out()
                rows.append(
                    Row(recipe, name, head[:8], decision, held, episodes, proposals, elapsed)
                )
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| recipe | after | head release | decision | held-out | recipe episodes | "
        "proposals / reflections | wall s |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.recipe} | {r.after} | {r.release} | {r.decision} | {r.held_out:.2f} | "
            f"{r.episodes} | {r.proposals} | {r.wall_s:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="reef-bench-harness-") as tmp:
        rows = [row for recipe in CONFIGS for row in run(recipe, Path(tmp) / recipe)]
    print(table(rows))


if __name__ == "__main__":
    main()
