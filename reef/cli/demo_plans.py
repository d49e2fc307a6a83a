"""What ``reef demo`` and ``bench/recipes.py`` run for each weight recipe: a :class:`Plan`.

A plan names the recipe, its toy task, the ``recipe:`` section it is configured with,
how the toy agent asks (prompts per round, answers per prompt, temperature, whether the
engine records token data) and how its grader answers each answer (:data:`Respond`: a
report with a correction, a score grouped by prompt, a score alone, or no report but the
user's next turn). :data:`PLANS` holds one per recipe; adding a recipe is one entry.
``openclaw_rl`` learns from the user's next turn rather than from reports: its plan tags
sessions, its ``respond`` is a scripted user's reply (:func:`reply_as_user`), its
``settings`` turn on session tracking, the judge and the top-K record, and its
``services`` start a scripted stand-in judge (:func:`scripted_judge`: fixed rules, no
model).

The tasks are on pseudo-words of 3 to 6 letters (:func:`words`), graded by
:func:`recipes.tasks.exact` (1.0 for the answer, else half the share of letters right by
position), the grader the recipes' gate uses too. Policy-gradient recipes (``grpo``,
``sao``) learn "First letter of: <word>" from :func:`build_warm_start`, the tiny model
after a short imitation warm-up on copying words: from the random model a policy never
samples a right answer, so a score alone carries no signal (``openclaw_rl`` learns the
same task from the same warm start).
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

from recipes.tasks import exact
from reef.testing.servers import running_upstream

#: every demo request and report carries this scenario
SCENARIO: Final = "demo"


def words(count: int, seed: int) -> list[str]:
    """``count`` distinct pseudo-words (consonant-vowel alternation), the same for a seed."""
    rng = random.Random(seed)  # noqa: S311 - reproducible toy data, not secrets
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    found: dict[str, None] = {}
    while len(found) < count:
        size = rng.randint(3, 6)
        found["".join(rng.choice(vowels if i % 2 else consonants) for i in range(size))] = None
    return list(found)


#: training words per seed (the rest: 60 for the gate, 60 held out)
TRAIN_WORDS: Final = 500


@dataclass(frozen=True, slots=True)
class WordSets:
    """Disjoint words: the agent's training prompts, the gate's and the demo's held-out."""

    train: list[str]
    gate: list[str]
    held_out: list[str]

    @classmethod
    def of(cls, seed: int) -> WordSets:
        found = words(TRAIN_WORDS + 120, seed)
        return cls(found[:TRAIN_WORDS], found[TRAIN_WORDS:-60], found[-60:])


@dataclass(frozen=True, slots=True)
class ToyTask:
    """A prompt about a word and its one right answer."""

    instruction: str
    answer: Callable[[str], str]

    def prompt(self, word: str) -> str:
        return f"{self.instruction}{word}"

    def score(self, output: str, word: str) -> float:
        return exact(output, self.answer(word))


COPY: Final = ToyTask("Return exactly: ", lambda word: word)
FIRST_LETTER: Final = ToyTask("First letter of: ", lambda word: word[0])


@dataclass(frozen=True, slots=True)
class Answered:
    """One answer the served model gave: what the grader needs to respond to it."""

    word: str
    answer: str
    receipt: str
    #: answers to the same prompt in one round share it (a grpo group)
    group: str
    #: the session the answer opened (sent as ``x-reef-tag-session`` when the plan tags
    #: sessions): a respond that plays the user's next turn continues it
    session: str


#: the grader's response to one answer: posts what the recipe learns from
Respond = Callable[[httpx.Client, ToyTask, Answered], None]
#: processes a recipe needs beside ``reef serve`` (a judge, say), started in the given
#: folder; yields the settings that point ``reef serve`` at them
Services = Callable[[Path], AbstractContextManager[dict[str, str]]]


@contextlib.contextmanager
def no_services(_: Path) -> Iterator[dict[str, str]]:
    yield {}


def _report(client: httpx.Client, body: dict[str, Any]) -> None:
    client.post("/reef/report", json=body).raise_for_status()


def report_correction(client: httpx.Client, task: ToyTask, done: Answered) -> None:
    """The score and the right answer as a correction (what ``sft`` imitates)."""
    score = task.score(done.answer, done.word)
    correction = {"correction": task.answer(done.word)}
    _report(client, {"score": score, "feedback": correction, "references": [done.receipt]})


def report_grouped_score(client: httpx.Client, task: ToyTask, done: Answered) -> None:
    """The score alone, grouped by prompt (``metadata.prompt_id``: grpo's groups)."""
    score = task.score(done.answer, done.word)
    meta = {"prompt_id": done.group}
    _report(client, {"score": score, "metadata": meta, "references": [done.receipt]})


def report_score(client: httpx.Client, task: ToyTask, done: Answered) -> None:
    """The score alone, for one rollout (``sao``)."""
    _report(client, {"score": task.score(done.answer, done.word), "references": [done.receipt]})


def accepts_first_letter(answer: str, word: str) -> bool:
    """The scripted user is lenient: an answer that starts with the word's first letter and
    is shorter than the word moves the task on (the held-out score stays the strict
    grader's, :func:`recipes.tasks.exact`)."""
    said = answer.strip().lower()
    return said.startswith(word[0]) and len(said) < len(word)


def reply_as_user(client: httpx.Client, task: ToyTask, done: Answered) -> None:
    """No report: the scripted user's next turn in the answer's session (``openclaw_rl``).
    An accepted answer gets "thanks!" and a new task, any other "no, ..." and the right
    answer; the judge reads that reply as the first turn's next state."""
    if accepts_first_letter(done.answer, done.word):
        reply = f"thanks! {task.prompt(done.word[::-1])}"
    else:
        reply = f"no, the answer to {task.prompt(done.word)!r} is {task.answer(done.word)}"
    messages = [
        {"role": "user", "content": task.prompt(done.word)},
        {"role": "assistant", "content": done.answer},
        {"role": "user", "content": reply},
    ]
    body = {"model": "tiny", "temperature": 0, "max_tokens": 10, "messages": messages}
    headers = {"x-reef-tag-session": done.session}
    client.post("/v1/chat/completions", json=body, headers=headers).raise_for_status()


@contextlib.contextmanager
def scripted_judge(folder: Path) -> Iterator[dict[str, str]]:
    """The scripted stand-in judge (:mod:`reef.testing.judge_upstream`: fixed rules, no
    model; a reply with "thanks" votes +1, one with "no," -1 and gets the hint "The user
    said: <reply>"), as the deployment's judge."""
    with running_upstream(folder, module="reef.testing.judge_upstream") as judge:
        yield {"REEF_JUDGE_URL": judge.v1_url}


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """How the demo drives one recipe."""

    recipe: str
    summary: str
    task: ToyTask
    respond: Respond
    #: the ``recipe:`` section without ``evaluation``, ``batching.batch_size`` and
    #: ``batching.group_size`` (:func:`write_recipe_config` adds them)
    config: str
    #: distinct prompts per round: one training batch
    prompts: int
    #: answers sampled per prompt (a grpo group); 1: one answer each
    answers: int = 1
    temperature: float = 0.0
    #: the engine records token ids and logprobs of every answer (REEF_RECORD_TOKENS)
    record_tokens: bool = False
    #: start from the copy warm start (:func:`build_warm_start`), not the random model
    warm_start: bool = False
    #: tag every request with its session (for recipes that learn from the next turn)
    tag_sessions: bool = False
    #: further ``reef serve`` settings the recipe needs (``REEF_*``)
    settings: Mapping[str, str] = field(default_factory=dict)
    services: Services = no_services
    #: what is scripted beyond the grader, printed with every result of the plan
    note: str = ""


PLANS: Final[dict[str, Plan]] = {
    "sft": Plan(
        recipe="sft",
        summary='"Return exactly: <word>"; every answer reported with the word as correction',
        task=COPY,
        respond=report_correction,
        config=(
            "  eligibility: {max_staleness: 2}\n"
            "  training: {steps: 40, learning_rate: 0.002}\n"
            "  gate: {policy: win_margin, margin: 0.0}\n"
        ),
        prompts=256,
    ),
    "grpo": Plan(
        recipe="grpo",
        summary='"First letter of: <word>" from a copying warm start; '
        "8 sampled answers per prompt, scores alone",
        task=FIRST_LETTER,
        respond=report_grouped_score,
        config=(
            "  eligibility: {max_staleness: 0}\n"
            "  batching: {group_by: prompt_id}\n"
            "  training: {steps: 4, learning_rate: 0.0005, clip: 0.2}\n"
            "  gate: {policy: win_margin, margin: 0.0}\n"
        ),
        prompts=32,
        answers=8,
        temperature=1.0,
        record_tokens=True,
        warm_start=True,
    ),
    "sao": Plan(
        recipe="sao",
        summary='"First letter of: <word>" from a copying warm start; '
        "one sampled answer per prompt, its score alone",
        task=FIRST_LETTER,
        respond=report_score,
        config=(
            "  training: {learning_rate: 0.001, epochs: 4, warmup_steps: 2,"
            " critic_steps_per_actor: 2}\n"
            "  gate: {policy: win_margin, margin: 0.0}\n"
        ),
        prompts=128,
        temperature=1.0,
        record_tokens=True,
        warm_start=True,
    ),
    "openclaw_rl": Plan(
        recipe="openclaw_rl",
        summary='"First letter of: <word>" from a copying warm start; no report: a scripted '
        'user replies "thanks!" or "no, ...", a judge scores the reply',
        task=FIRST_LETTER,
        respond=reply_as_user,
        config=(
            "  training: {learning_rate: 0.0008, epochs: 2, minibatch: 16, distill_coef: 0.01,"
            " baseline: batch_mean}\n"
            "  gate: {policy: win_margin, margin: 0.0}\n"
        ),
        prompts=128,
        temperature=1.0,
        record_tokens=True,
        warm_start=True,
        tag_sessions=True,
        settings={
            "REEF_TRACK_SESSIONS": "true",
            "REEF_JUDGE_TURNS": "true",
            "REEF_JUDGE_HINTS": "true",
            "REEF_RECORD_TOP_LOGPROBS": "4",
        },
        services=scripted_judge,
        note="the judge is a scripted stand-in (fixed rules, no model: "
        'reef.testing.judge_upstream votes +1 on "thanks", -1 on "no,"), not a judge model',
    ),
}


def write_recipe_config(folder: Path, plan: Plan, gate_words: list[str], prompts: int) -> Path:
    """The deployment's recipe file: the plan's section, ``prompts`` units per batch and
    the gate's held-out tasks (words the agent never asks about)."""
    tasks = folder / "gate-tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"prompt": plan.task.prompt(w), "answer": plan.task.answer(w)}) + "\n"
            for w in gate_words
        )
    )
    sizes = f"batch_size: {prompts}"
    if plan.answers > 1:  # a unit of the batch is a group of answers to one prompt
        sizes += f", group_size: {plan.answers}"
    section = plan.config
    if "  batching: {" in section:
        section = section.replace("  batching: {", f"  batching: {{{sizes}, ", 1)
    else:
        section += f"  batching: {{{sizes}}}\n"
    config = folder / "recipe.yaml"
    config.write_text(
        f"recipe:\n{section}  evaluation: {{tasks_file: {tasks.name}, max_new_tokens: 10}}\n"
    )
    return config


#: imitation rounds of the warm start, and words and AdamW steps per round
WARM_ROUNDS: Final = 8
WARM_WORDS: Final = 32
WARM_STEPS: Final = 30


def build_warm_start(folder: Path, train_words: list[str]) -> Path:
    """The tiny model after a short imitation warm-up on *copying* words (8 rounds of 30
    AdamW steps on 32 training words each): it answers "First letter of: <word>" with a
    garbled copy of the word, partial credit only (a low held-out score). Deterministic."""
    from recipes.training import SftTraining
    from trainers.backends.torch_backend import train_sft

    rng = random.Random(99)  # noqa: S311 - reproducible toy data, not secrets
    parent: Path | None = None
    for index in range(WARM_ROUNDS):
        chosen = rng.sample(train_words, WARM_WORDS)
        examples = [([{"role": "user", "content": COPY.prompt(w)}], w) for w in chosen]
        out = folder / f"warm-{index}"
        train_sft(parent, examples, out, SftTraining(steps=WARM_STEPS, learning_rate=3e-3))
        parent = out
    assert parent is not None
    return parent
