"""The demo's learning loop, shared by ``reef demo`` and ``bench/recipes.py``.

:func:`deployment` starts ``reef serve`` on a fresh embedded state dir with no upstream
(the built-in tiny engine, its sidecar following the demo scenario, the plan's recipe
and its in-process trainer, the plan's settings and services: a judge, say).
:class:`Agent` is the toy agent and its grader, talking to Reef over HTTP only.
:func:`learn` runs rounds in lock step, so that asking never competes with training for
the cores:

1. ask a round: ``plan.prompts`` training prompts, ``plan.answers`` answers each;
2. respond to every answer (``plan.respond``: a report, usually; the user's next turn
   for a recipe that learns from it, which the judge turns into a report);
3. wait until the trainer has read every sample and holds none (it decided the batch:
   committed, rejected by the gate, or skipped);
4. once the engine serves a new head, measure it: the mean score of greedy answers to
   the held-out words, through the API.

Nothing here imports torch: the engine and the trainer run in ``reef serve``.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import httpx

from reef.cli.demo_plans import (
    SCENARIO,
    Answered,
    Plan,
    WordSets,
    build_warm_start,
    write_recipe_config,
)
from reef.testing.servers import ReefProcess, start_reef

#: the longest wait for the trainer to decide one batch
SETTLE_TIMEOUT_S = 600.0
POLL_S = 0.25


@dataclass(frozen=True, slots=True)
class Release:
    """A release the engine served, measured."""

    release_id: str
    score: float
    #: responses (reports) sent before it was measured, and seconds since the loop began
    samples: int
    seconds: float


@dataclass
class Progress:
    """What the loop did so far (the live panel and the final table show it)."""

    phase: str = "starting"
    requests: int = 0
    responses: int = 0
    rounds: int = 0
    releases: list[Release] = field(default_factory=list)
    #: the number of releases measured when each rejected candidate was decided
    rejected_after: list[int] = field(default_factory=list)
    trainer: dict[str, Any] = field(default_factory=dict)

    @property
    def rejected(self) -> int:
        return len(self.rejected_after)

    def first_above(self, target: float) -> Release | None:
        return next((r for r in self.releases if r.score > target), None)


@contextlib.contextmanager
def deployment(
    plan: Plan, sets: WordSets, state: Path, *, prompts: int, token: str, log_dir: Path
) -> Iterator[ReefProcess]:
    """``reef serve`` for ``plan`` on a fresh ``state`` dir, its output in ``log_dir``; the
    shell's ``REEF_*`` settings are not passed on (an upstream there would be served)."""
    env = {
        "REEF_TOKEN": token,
        "REEF_RECIPE": plan.recipe,
        "REEF_RECIPE_CONFIG": str(write_recipe_config(state, plan, sets.gate, prompts)),
        "REEF_ENGINE_SCENARIO": SCENARIO,
        "REEF_RECORD_TOKENS": "true" if plan.record_tokens else "false",
    }
    if plan.warm_start:
        env["REEF_SEED_DIR"] = str(build_warm_start(state / "warm-start", sets.train))
    with plan.services(state / "services") as extra:
        server = start_reef(
            env=env | dict(plan.settings) | extra,
            state_dir=state / "serve",
            log_dir=log_dir,
            timeout=180.0,
            name="serve",
        )
        try:
            yield server
        finally:
            server.stop(30.0)


class Agent:
    """The toy agent and its grader: asks through Reef, responds, watches the trainer."""

    def __init__(
        self, base_url: str, token: str, plan: Plan, sets: WordSets, *, seed: int, workers: int
    ) -> None:
        self.http = httpx.Client(
            base_url=base_url,
            timeout=120.0,
            headers={"Authorization": f"Bearer {token}", "x-reef-scenario": SCENARIO},
        )
        self.plan, self.sets, self.workers = plan, sets, workers
        self.rng = random.Random(seed)  # noqa: S311 - reproducible toy data, not secrets
        self.progress = Progress()

    def close(self) -> None:
        self.http.close()

    def ask(self, word: str, *, group: str = "", seed: int | None = None) -> Answered:
        """One chat completion through Reef (greedy unless the plan samples)."""
        body: dict[str, Any] = {
            "model": "tiny",
            "temperature": self.plan.temperature if seed is not None else 0,
            "max_tokens": 10,
            "messages": [{"role": "user", "content": self.plan.task.prompt(word)}],
        }
        if seed is not None:
            body["seed"] = seed
        session = secrets.token_hex(8)
        tag = {"x-reef-tag-session": session} if self.plan.tag_sessions else {}
        response = self.http.post("/v1/chat/completions", json=body, headers=tag)
        response.raise_for_status()
        answer = response.json()["choices"][0]["message"]["content"] or ""
        receipt = response.headers["x-reef-agent-record-id"]
        return Answered(word, answer, receipt, group, session)

    def play_round(self, prompts: int) -> None:
        """Ask ``prompts`` training words (``plan.answers`` sampled answers each) and respond
        to every answer."""
        self.progress.rounds += 1
        tag = f"r{self.progress.rounds}"
        chosen = self.rng.sample(self.sets.train, prompts)
        groups = [(w, f"{tag}:{w}") for w in chosen for _ in range(self.plan.answers)]
        asked = [(w, group, self.rng.randrange(2**31)) for w, group in groups]
        with ThreadPoolExecutor(self.workers) as pool:
            self.progress.phase = "asking"
            done = list(pool.map(lambda a: self.ask(a[0], group=a[1], seed=a[2]), asked))
            self.progress.requests += len(done)
            self.progress.phase = "reporting"
            list(pool.map(lambda d: self.plan.respond(self.http, self.plan.task, d), done))
            self.progress.responses += len(done)

    def measure(self) -> float:
        """Mean held-out score of the served model's greedy answers."""
        self.progress.phase = "measuring"
        held_out = self.sets.held_out
        with ThreadPoolExecutor(self.workers) as pool:
            answers = list(pool.map(self.ask, held_out))
        self.progress.requests += len(answers)
        task = self.plan.task
        return sum(task.score(a.answer, a.word) for a in answers) / len(held_out)

    def serving(self) -> tuple[str, str | None]:
        """(head release, release the local engine serves); refreshes the trainer's status."""
        status = self.http.get("/reef/status").raise_for_status().json()
        self.progress.trainer = status.get("trainer") or {}
        scenario = status["scenarios"].get(SCENARIO, {})
        engine = scenario.get("engines", {}).get("local", {})
        return scenario.get("head_release_id", ""), engine.get("release_id")

    def settled(self) -> bool:
        """The trainer read a sample for every response and holds none: it decided."""
        head, served = self.serving()
        trainer = self.progress.trainer
        if trainer.get("error"):
            raise click.ClickException(f"the trainer failed: {trainer['error']}")
        read = int(trainer.get("samples_read", 0))
        return (
            read >= self.progress.responses
            and trainer.get("samples_pending") == 0
            and (head == served)
        )


def learn(
    agent: Agent,
    *,
    prompts: int,
    done: Callable[[Progress], bool],
    budget_s: float,
    on_change: Callable[[Progress], None] = lambda _: None,
) -> Progress:
    """Measure the served release, then play rounds until ``done`` or ``budget_s``."""
    progress, started = agent.progress, time.monotonic()

    def observe() -> None:
        head, served = agent.serving()
        rejected = int(progress.trainer.get("candidates", {}).get("rejected", 0))
        progress.rejected_after += [len(progress.releases)] * (rejected - progress.rejected)
        measured = {r.release_id for r in progress.releases}
        if head and head == served and head not in measured:
            score = agent.measure()
            elapsed = time.monotonic() - started
            progress.releases.append(Release(head, score, progress.responses, elapsed))
        on_change(progress)

    agent.ask(agent.sets.held_out[0])  # creates the scenario: its creation release serves
    progress.requests += 1

    def engine_on_head() -> bool:
        head, served = agent.serving()
        return bool(head) and head == served

    _wait(agent, engine_on_head, on_change, "loading the creation release")
    observe()
    while not done(progress) and time.monotonic() - started < budget_s:
        agent.play_round(prompts)
        on_change(progress)
        _wait(agent, agent.settled, on_change, "training")
        observe()
    progress.phase = "done"
    on_change(progress)
    return progress


def _wait(
    agent: Agent, ready: Callable[[], bool], on_change: Callable[[Progress], None], phase: str
) -> None:
    agent.progress.phase = phase
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            raise click.ClickException(f"gave up {phase} after {SETTLE_TIMEOUT_S:.0f}s")
        on_change(agent.progress)
        time.sleep(POLL_S)


def new_token() -> str:
    return secrets.token_hex(8)
