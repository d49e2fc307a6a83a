"""``reef demo``: the whole loop on a laptop, live — serve, record, report, train, gate, release.

It starts ``reef serve`` on a fresh embedded state dir with no upstream (so the built-in
tiny engine serves), the ``sft`` recipe, its in-process trainer and the engine's sidecar.
A toy agent then asks "Return exactly: <word>" questions through Reef, a programmatic
grader scores each answer (1 for an exact match, else half the share of matching
characters) and reports it with the right answer as a correction. Every time the release
chain moves, the served model is measured on held-out words. At the end: a table and a
PNG plot of the mean held-out score per release, with rejected candidates marked.
"""

from __future__ import annotations

import csv
import json
import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table

SCENARIO = "demo"


def words(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)  # noqa: S311 - reproducible toy data, not secrets
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    found: dict[str, None] = {}
    while len(found) < count:
        size = rng.randint(3, 6)
        found["".join(rng.choice(vowels if i % 2 else consonants) for i in range(size))] = None
    return list(found)


def grade(answer: str, word: str) -> float:
    answer = answer.strip()
    if answer == word:
        return 1.0
    same = sum(1 for a, b in zip(answer, word, strict=False) if a == b)
    return 0.5 * same / max(len(word), len(answer), 1)


@dataclass
class Scoreboard:
    requests: int = 0
    reports: int = 0
    releases: list[tuple[str, float]] = field(default_factory=list)
    rejected_after: list[int] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)

    def table(self) -> Table:
        trainer = self.status.get("trainer", {})
        candidates = trainer.get("candidates", {})
        table = Table(title="Reef demo: the loop, live", show_header=False)
        table.add_row("requests served", str(self.requests))
        table.add_row("reports sent (joined into samples)", str(self.reports))
        table.add_row("samples pending", str(self.status.get("samples_pending", "-")))
        table.add_row("batches trained", str(trainer.get("batches", "-")))
        table.add_row(
            "candidates accepted / rejected",
            f"{candidates.get('accepted', 0)} / {candidates.get('rejected', 0)}",
        )
        table.add_row(
            "releases (held-out score)",
            "  ".join(f"{r[:8]}={s:.2f}" for r, s in self.releases) or "-",
        )
        return table


class Demo:
    def __init__(self, base_url: str, token: str, seed: int) -> None:
        self.http = httpx.Client(
            base_url=base_url,
            timeout=120.0,
            headers={"Authorization": f"Bearer {token}", "x-reef-scenario": SCENARIO},
        )
        all_words = words(560, seed)
        self.train, self.held_out = all_words[:500], all_words[500:]
        self.board = Scoreboard()

    def ask(self, word: str) -> tuple[str, str]:
        body = {
            "model": "tiny",
            "temperature": 0,
            "max_tokens": 10,
            "messages": [{"role": "user", "content": f"Return exactly: {word}"}],
        }
        response = self.http.post("/v1/chat/completions", json=body)
        response.raise_for_status()
        self.board.requests += 1
        answer = response.json()["choices"][0]["message"]["content"] or ""
        return answer, response.headers["x-reef-agent-record-id"]

    def round(self, batch: list[str]) -> None:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(self.ask, batch))
        for word, (answer, receipt) in zip(batch, results, strict=True):
            score = grade(answer, word)
            self.http.post(
                "/reef/report",
                json={
                    "score": score,
                    "feedback": {"correction": word},
                    "references": [receipt],
                },
            ).raise_for_status()
            self.board.reports += 1

    def measure(self) -> float:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(self.ask, self.held_out))
        return sum(grade(a, w) for (a, _), w in zip(answers, self.held_out, strict=True)) / len(
            self.held_out
        )

    def refresh(self) -> tuple[str, str | None]:
        self.board.status = self.http.get("/reef/status").raise_for_status().json()
        scenario = self.board.status["scenarios"].get(SCENARIO, {})
        engine = scenario.get("engines", {}).get("local", {})
        return scenario.get("head_release_id", ""), engine.get("release_id")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _recipe(state: Path, demo: Demo, batch: int) -> Path:
    tasks = state / "eval.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"prompt": f"Return exactly: {w}", "answer": w}) + "\n"
            for w in demo.train[:60]
        )
    )
    config = state / "demo.yaml"
    config.write_text(
        "recipe:\n  eligibility: {max_staleness: 2}\n"
        f"  batching: {{batch_size: {batch}}}\n"
        "  training: {steps: 30, learning_rate: 0.003}\n"
        f"  evaluation: {{tasks_file: {tasks.name}, max_new_tokens: 10}}\n"
        "  gate: {policy: win_margin, margin: 0.0}\n"
    )
    return config


@click.command("demo")
@click.option(
    "--releases", default=4, show_default=True, help="Stop after this many trained releases."
)
@click.option("--minutes", default=9.0, show_default=True, help="Stop after this long anyway.")
@click.option("--batch", default=128, show_default=True, help="Reports per training batch.")
@click.option(
    "--out", type=click.Path(path_type=Path), default=Path("reef-demo"), show_default=True
)
@click.option("--seed", default=11, show_default=True)
def demo(releases: int, minutes: float, batch: int, out: Path, seed: int) -> None:
    """Run the loop on the built-in tiny model and show it learning (no network, no GPU)."""
    console = Console()
    out.mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix="reef-demo-"))
    token, port = secrets.token_hex(8), _free_port()
    placeholder = Demo(f"http://127.0.0.1:{port}", token, seed)
    env = {
        **os.environ,
        "REEF_TOKEN": token,
        "REEF_RECIPE": "sft",
        "REEF_RECIPE_CONFIG": str(_recipe(state, placeholder, batch)),
        "REEF_ENGINE_SCENARIO": SCENARIO,
    }
    log = (out / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "reef.cli", "serve", "--state-dir", str(state), "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_healthy(port, server)
        run = Demo(f"http://127.0.0.1:{port}", token, seed)
        _loop(run, console, releases, minutes * 60, batch, seed)
        _finish(run, console, out)
    finally:
        server.terminate()
        server.wait(30)
        log.close()
        shutil.rmtree(state, ignore_errors=True)


def _wait_healthy(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise click.ClickException("reef serve exited; see the serve.log in --out")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise click.ClickException("reef serve did not become healthy")


def _loop(
    run: Demo, console: Console, releases: int, budget_s: float, batch: int, seed: int
) -> None:
    rng = random.Random(seed)  # noqa: S311 - reproducible toy data, not secrets
    started = time.monotonic()
    measured: set[str] = set()
    rejected_seen = 0
    with Live(run.board.table(), console=console, refresh_per_second=2) as live:
        while time.monotonic() - started < budget_s:
            head, served = run.refresh()
            if head and head == served and head not in measured:
                measured.add(head)
                run.board.releases.append((head, run.measure()))
            candidates = run.board.status.get("trainer", {}).get("candidates", {})
            rejected = int(candidates.get("rejected", 0))
            if rejected > rejected_seen:
                run.board.rejected_after.append(len(run.board.releases) - 1)
                rejected_seen = rejected
            live.update(run.board.table())
            if len(run.board.releases) > releases:
                return
            run.round(rng.sample(run.train, batch))
            live.update(run.board.table())


def _finish(run: Demo, console: Console, out: Path) -> None:
    table = Table("release", "position in chain", "mean held-out score")
    with (out / "scores.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["index", "release_id", "score"])
        for index, (release, score) in enumerate(run.board.releases):
            writer.writerow([index, release, f"{score:.4f}"])
            table.add_row(release, str(index), f"{score:.3f}")
    console.print(table)
    _plot(run.board, out / "scores.png")
    console.print(f"wrote {out / 'scores.csv'} and {out / 'scores.png'}")


def _plot(board: Scoreboard, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    scores = [score for _, score in board.releases]
    axes.plot(range(len(scores)), scores, marker="o", label="served release")
    for index in board.rejected_after:
        axes.axvline(index + 0.5, color="red", linestyle=":", alpha=0.6)
    if board.rejected_after:
        axes.plot([], [], color="red", linestyle=":", label="candidate rejected by the gate")
    axes.set_xlabel("release (in chain order)")
    axes.set_ylabel("mean held-out score")
    axes.set_ylim(0, 1)
    axes.set_title("Reef demo: the served model improves release by release")
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
