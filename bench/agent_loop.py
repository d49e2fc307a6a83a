"""The closed loop of bench/agents.py: real agent CLIs, a real-architecture folder served
by Reef, a checker that reports each session's outcome, and the releases that follow.

* :class:`Cli`: one agent CLI run non-interactively with a short system prompt and one
  tool (Claude Code ``-p`` with ``Write``; ``codex exec`` with its shell tool), the
  answer that would have succeeded for a task, in the model's tool-call syntax
  (Qwen2.5's ``<tool_call>`` JSON, read back by the engine's ``qwen25`` parser).
* :func:`probe`: one session against a capturing stand-in, for the request the CLI
  really sends (the tokenizer is trained on it; the gate's tasks are rendered from it).
* :func:`build_folder`: a Qwen2 folder with random weights, a BPE tokenizer trained on
  the probed requests and the syllables of the task words (never the words), a chat
  template that renders tools, and Qwen2.5-Instruct's sampling defaults in its
  ``generation_config.json``; :func:`warm_copy`, one phase of the copy warm start
  (:data:`COPY_WARM_START`).
* :class:`Checker`: after a session, the exchanges it recorded (``GET
  /reef/scenarios/{s}/records``), success checked on disk, and a report quoting the
  receipt (``reef_client``) of the first exchange, and of the second after a call that
  succeeded: the outcome as the score, and as correction what the exchange should have
  answered (the first: the tool call; the second: a short text that ends the session).
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from reef_client import ReefClient

from reef_dev import agent_clis
from reef_dev.agent_clis import AgentRun
from reef_dev.chat_templates import QWEN25_TOOLS

#: the folder's pre-tokeniser split: a run of letters is a piece of its own, apart from the
#: space or punctuation before it, so a word is the same tokens in a sentence (" name"),
#: a path ("/name") or a JSON string ('"name'). A pretrained tokenizer gives those three
#: different tokens, and a pretrained model has learned from its corpus that they are
#: one word; random weights have not, and could not copy a word they never trained on
#: from the prompt into a call
LETTER_RUNS_SPLIT = r"\p{L}+|\p{N}|\s+|[^\s\p{L}\p{N}]+"
CONSONANTS, VOWELS = "bcdfghjklmnprstvwz", "aeiou"
#: the syllables the tasks' pseudo-words are made of, which the tokenizer learns as pieces
#: (never the words themselves): any word, held-out ones included, is pieces training saw
SYLLABLES = " ".join(c + v for c in CONSONANTS for v in VOWELS)
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: the sampling of Qwen2.5-Instruct's generation_config.json, which the folder ships so the
#: engine samples the CLIs' requests (they send no temperature) as it would that family;
#: its repetition_penalty (1.05) is left out: Reef's decoder applies none
QWEN25_SAMPLING = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20}

DONE = "Done."
PHRASES = (
    "create a file {name} containing {word}",
    "write {word} to a new file {name}",
    "make {name} with the text {word}",
)


def pseudo_words(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    found: dict[str, None] = {}
    while len(found) < count:
        size = rng.randint(4, 6)
        found["".join(rng.choice(VOWELS if i % 2 else CONSONANTS) for i in range(size))] = None
    return list(found)


@dataclass(frozen=True)
class Task:
    """Create the file ``name`` holding ``word``; checked on disk."""

    name: str
    word: str
    phrase: str

    @property
    def prompt(self) -> str:
        return self.phrase.format(name=self.name, word=self.word)

    def succeeded(self, workdir: Path) -> bool:
        target = workdir / self.name
        return target.is_file() and target.read_text(errors="replace").strip() == self.word


def task_sets(train: int, held_out: int, seed: int = 3) -> tuple[list[Task], list[Task]]:
    """Training and held-out tasks; no word (as a name or as content) is in both."""
    words = pseudo_words(2 * (train + held_out), seed)
    rng = random.Random(seed)

    def make(pool: list[str], count: int) -> list[Task]:
        return [
            Task(f"{pool[2 * i]}.txt", pool[2 * i + 1], rng.choice(PHRASES)) for i in range(count)
        ]

    return make(words[: 2 * train], train), make(words[2 * train :], held_out)


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    """A call as the Qwen2.5 template writes it in an assistant turn."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


# ---------------------------------------------------------------------------
# The CLIs

CLAUDE_SYSTEM = "Use the Write tool to create the file the user asks for."
CODEX_INSTRUCTIONS = "Run one shell command with exec_command to do what the user asks."


@dataclass(frozen=True)
class Cli:
    name: str
    #: (prompt, base_url, token, scenario, workdir, home) -> the run
    command: Callable[[str, str, str, str, Path, Path], AgentRun]
    #: the answer that would have succeeded, for a task in a working directory
    correct: Callable[[Task, Path], str]


#: the CLIs' environment's PATH: the system's programs only (Codex's commands need no more)
SYSTEM_PATH = {"PATH": "/usr/bin:/bin"}
#: Codex's optional context blocks and tools, off: its request holds the instructions,
#: the task and two tools (``exec_command``, ``write_stdin``), no skills block
CODEX_OVERRIDES = (
    "include_permissions_instructions=false",
    "include_environment_context=false",
    'web_search="disabled"',
    "skills.include_instructions=false",
    "tools.experimental_request_user_input.enabled=false",
)
CODEX_DISABLED = ("multi_agent", "goals", "view_image", "collaboration_modes", "apps")


def _claude(
    prompt: str, base_url: str, token: str, scenario: str, workdir: Path, home: Path
) -> AgentRun:
    """``claude -p`` with a one-sentence system prompt and the Write tool alone."""
    return agent_clis.claude_code(
        prompt,
        base_url=base_url,
        token=token,
        scenario=scenario,
        workdir=workdir,
        home=home,
        tools=("Write",),
        extra_args=("--tools", "Write", "--system-prompt", CLAUDE_SYSTEM, "--max-turns", "2"),
        extra_env=SYSTEM_PATH | {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "96"},
    )


def _codex(
    prompt: str,
    base_url: str,
    token: str,
    scenario: str,
    workdir: Path,
    home: Path,
    sandbox: str = "workspace-write",
) -> AgentRun:
    """``codex exec`` with Reef as its Responses provider, no retries, short
    instructions and the optional tools and context blocks off."""
    instructions = home / "codex" / "instructions.md"
    instructions.parent.mkdir(parents=True, exist_ok=True)
    instructions.write_text(CODEX_INSTRUCTIONS + "\n")
    return agent_clis.codex(
        prompt,
        v1_url=base_url + "/v1",
        token=token,
        scenario=scenario,
        workdir=workdir,
        home=home,
        sandbox=sandbox,
        retries=0,
        overrides=(f"model_instructions_file={json.dumps(str(instructions))}", *CODEX_OVERRIDES),
        disabled=CODEX_DISABLED,
        extra_env=SYSTEM_PATH,
    )


CLIS = {
    "claude": Cli(
        "claude",
        _claude,
        lambda task, workdir: tool_call(
            "Write", {"file_path": str(workdir / task.name), "content": task.word}
        ),
    ),
    "codex": Cli(
        "codex",
        _codex,
        lambda task, workdir: tool_call("exec_command", {"cmd": f"echo {task.word} > {task.name}"}),
    ),
}


def with_codex_sandbox(cli: Cli, sandbox: str) -> Cli:
    """``cli`` (Codex) running its commands under ``sandbox`` (``codex exec --sandbox``)."""
    return replace(cli, command=partial(_codex, sandbox=sandbox))


# ---------------------------------------------------------------------------
# Probing what a CLI sends


class _Capture(BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]]

    def do_POST(self) -> None:  # one request: kept, answered with an error (the CLI stops)
        size = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(size)
        with contextlib.suppress(ValueError):
            self.server.bodies.append(json.loads(raw))  # type: ignore[attr-defined]
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"type":"error","error":{"type":"invalid_request_error","message":"x"}}')

    def log_message(self, *args: Any) -> None:
        return


def probe(cli: Cli, prompt: str, workdir: Path, home: Path) -> dict[str, Any]:
    """The first model request ``cli`` sends for ``prompt`` (answered with an error)."""
    workdir.mkdir(parents=True, exist_ok=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    server.bodies = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with contextlib.suppress(subprocess.TimeoutExpired):
            cli.command(prompt, url, "probe", "probe", workdir, home).run(timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    bodies: list[dict[str, Any]] = server.bodies  # type: ignore[attr-defined]
    if not bodies:
        raise RuntimeError(f"{cli.name} sent no model request to the probe")
    return bodies[0]


# ---------------------------------------------------------------------------
# The model folder


def request_texts(body: dict[str, Any]) -> list[str]:
    """A probed request's text: its strings, and its tools as JSON."""
    return [*_strings(body), *[json.dumps(t) for t in body.get("tools") or []]]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def build_folder(
    directory: Path,
    bodies: Sequence[dict[str, Any]],
    texts: Sequence[str],
    *,
    vocab_size: int = 2048,
    hidden: int = 128,
    layers: int = 2,
    context: int = 4096,
    seed: int = 0,
) -> Path:
    """A Qwen2 folder (random weights from ``seed``) whose tokenizer is trained on the
    probed requests (their strings and their tools as JSON), ``texts`` and the syllables
    of the tasks' words (:data:`SYLLABLES`), with the Qwen2.5 tool template and
    Qwen2.5-Instruct's sampling defaults. ``texts`` must not hold the task words: a word
    the tokenizer learned whole is one token whose embedding only that word's own tasks
    train, so no model could copy a held-out one."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    corpus = [*texts, *[SYLLABLES] * 8]
    for body in bodies:
        corpus += request_texts(body)
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LETTER_RUNS_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    texts_and_turns = []
    for text in [*corpus * 4, QWEN25_TOOLS]:  # each also as a user turn: roles are tokens
        texts_and_turns += [text, f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"]
    core.train_from_iterator(texts_and_turns, trainer=trainer)
    factory: Any = PreTrainedTokenizerFast
    tokenizer = factory(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = QWEN25_TOOLS
    make_config: Any = Qwen2Config
    make_model: Any = Qwen2ForCausalLM
    config = make_config(
        vocab_size=-(-len(tokenizer) // 64) * 64,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        max_position_embeddings=context,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = make_model(config)
    model.generation_config.update(**QWEN25_SAMPLING)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@dataclass(frozen=True)
class WarmPhase:
    """Steps of the copy warm start: the prompts' filler, the batch and the optimiser."""

    steps: int
    #: the most filler words in front of the words to repeat
    filler: int
    batch: int
    learning_rate: float
    #: the gradient norm clipped to (None: not clipped)
    clip: float | None = None
    #: the share of examples whose filler is a window of the probed request's text, as a
    #: pretraining corpus holds text of that kind (the others: pseudo-words)
    text_share: float = 0.0
    #: added to the warm start's seed: each phase draws its own examples
    seed: int = 0


#: the copy warm start measured on the CPU (hidden 64, 2 layers; docs/benchmarks/agents.md):
#: copying is learned behind short prompts, then carried to prompts as long as Claude
#: Code's, then to filler that reads like them
COPY_WARM_START = (
    WarmPhase(2000, 30, 32, 2e-3),
    WarmPhase(400, 250, 8, 1e-3),
    WarmPhase(500, 250, 12, 1e-3),
    WarmPhase(600, 250, 12, 4e-4, clip=1.0),
    WarmPhase(500, 250, 12, 4e-4, clip=1.0, text_share=0.7),
)


def word_pool(avoid: Sequence[str], seed: int) -> list[str]:
    """2,000 pseudo-words drawn from ``seed``, none of them in ``avoid``: a warm start's
    words, never a task's."""
    taken = set(avoid)
    return [w for w in pseudo_words(4000, seed + 1000) if w not in taken][:2000]


def warm_copy(
    folder: Path,
    avoid: Sequence[str],
    phase: WarmPhase,
    *,
    device: str,
    texts: Sequence[str] = (),
    seed: int = 5,
) -> float:
    """Pretrain the folder's weights on a generic ability a pretrained model brings,
    copying: a user turn "Repeat exactly: <words>" (pseudo-words none of which is in
    ``avoid``) behind a system turn of filler of random length (pseudo-words, or a window
    of the words of ``texts``), answered with the words. No task, tool or tool-call
    syntax is seen. Overwrites the folder's weights; returns the last batch's loss."""
    rng = random.Random(seed + phase.seed)
    pool = word_pool(avoid, seed)
    text = " ".join(texts).split()

    def padding() -> str:
        if phase.text_share and text and rng.random() < phase.text_share:
            count = rng.randint(0, phase.filler)
            start = rng.randint(0, max(0, len(text) - count))
            return " ".join(text[start : start + count])
        return " ".join(rng.choice(pool) for _ in range(rng.randint(0, phase.filler)))

    def example(tokenizer: Any, context: int) -> tuple[list[int], list[bool]]:
        filler = padding()
        words = " ".join(rng.choice(pool) for _ in range(rng.randint(1, 5)))
        messages = [
            {"role": "system", "content": filler},
            {"role": "user", "content": f"Repeat exactly: {words}"},
        ]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"][-(context - 32) :]
        answer = tokenizer(words + "<|im_end|>", add_special_tokens=False)["input_ids"]
        return ids + answer, [False] * len(ids) + [True] * len(answer)

    return train_rows(folder, phase, device, example)


def train_rows(
    folder: Path,
    phase: WarmPhase,
    device: str,
    example: Callable[[Any, int], tuple[list[int], list[bool]]],
) -> float:
    """Train the folder's weights for ``phase.steps`` batches of ``example(tokenizer,
    context)`` rows (token ids, and which of them carry the loss); saves the weights and
    returns the last batch's loss."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loader: Any = AutoModelForCausalLM
    tokenizer: Any = AutoTokenizer.from_pretrained(folder)
    model: Any = loader.from_pretrained(folder).to(device)
    context = int(model.config.max_position_embeddings)
    optimiser = torch.optim.AdamW(model.parameters(), lr=phase.learning_rate)
    model.train(True)
    loss: Any = torch.tensor(0.0)
    batch = phase.batch
    kind = torch.device(device).type
    started = time.monotonic()
    recent: list[float] = []
    for step in range(phase.steps):
        rows = [example(tokenizer, context) for _ in range(batch)]
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((batch, width), int(tokenizer.pad_token_id))
        labels = torch.full((batch, width), -100)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for i, (row, trained) in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            labels[i, : len(row)] = torch.tensor(
                [t if keep else -100 for t, keep in zip(row, trained, strict=True)]
            )
            mask[i, : len(row)] = 1
        # the logits of the trained positions only: the vocabulary's projection of every
        # prompt position would cost about as much as the rest of the model
        targets = labels[:, 1:].to(device)
        kept = targets != -100
        with torch.autocast(device_type=kind, dtype=torch.bfloat16, enabled=kind == "cuda"):
            hidden = model.model(input_ids=ids.to(device), attention_mask=mask.to(device))
            logits = model.lm_head(hidden.last_hidden_state[:, :-1][kept])
        loss = torch.nn.functional.cross_entropy(logits.float(), targets[kept])
        optimiser.zero_grad()
        loss.backward()
        if phase.clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), phase.clip)
        optimiser.step()
        recent = [*recent[-99:], float(loss.detach())]
        if (step + 1) % 100 == 0:
            seconds, mean = time.monotonic() - started, sum(recent) / len(recent)
            print(f"  step {step + 1}: loss {recent[-1]:.3f}, mean {mean:.3f} ({seconds:.0f}s)")
    model.train(False)
    model.to("cpu").save_pretrained(folder)
    return float(loss.detach())


# ---------------------------------------------------------------------------
# Sessions and the checker


@dataclass
class Session:
    task: Task
    succeeded: bool
    seconds: float
    receipts: list[str]
    releases: list[str]
    returncode: int | None
    prompt_tokens: list[int]
    responses: list[Any]


@dataclass
class Checker:
    """Runs sessions of one CLI against Reef and reports their outcomes."""

    cli: Cli
    base_url: str
    token: str
    scenario: str
    work: Path
    cursor: str = "-1.-1"
    reports: int = 0
    sessions: int = 0
    client: ReefClient = field(init=False)

    def __post_init__(self) -> None:
        self.client = ReefClient(self.base_url, token=self.token, timeout_s=60.0)

    @property
    def workdir(self) -> Path:
        return self.work / f"{self.cli.name}-workdir"

    def _new_exchanges(self) -> list[dict[str, Any]]:
        """Exchanges recorded since the last call (the records API, paged by cursor)."""
        found: list[dict[str, Any]] = []
        headers = {"Authorization": f"Bearer {self.token}"}
        url = f"{self.base_url}/reef/scenarios/{self.scenario}/records"
        while True:
            page = httpx.get(url, params={"after": self.cursor, "limit": 100}, headers=headers)
            if page.status_code == 404:  # the scenario has no record yet
                return found
            page.raise_for_status()
            body = page.json()
            found += [r for r in body.get("records", []) if r.get("request_type") == "inference"]
            if not body.get("records") or not body.get("next_after"):
                return found
            self.cursor = body["next_after"]

    def run(self, task: Task, timeout: float = 120.0) -> Session:
        """One session: a clean working directory, the CLI, the outcome on disk."""
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        home = self.work / f"{self.cli.name}-home"
        shutil.rmtree(home, ignore_errors=True)
        self._new_exchanges()  # skip whatever came before
        started = time.monotonic()
        run = self.cli.command(
            task.prompt, self.base_url, self.token, self.scenario, self.workdir, home
        )
        code: int | None
        try:
            code = run.run(timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = None
        seconds = time.monotonic() - started
        exchanges = self._settled()
        self.sessions += 1
        return Session(
            task,
            task.succeeded(self.workdir),
            seconds,
            [e["agent_record_id"] for e in exchanges],
            [str(e.get("release_id") or "") for e in exchanges],
            code,
            [int((e.get("usage") or {}).get("input_tokens") or 0) for e in exchanges],
            [e.get("response") for e in exchanges],
        )

    def _settled(self) -> list[dict[str, Any]]:
        """The session's exchanges, once the records API shows them (it follows the log)."""
        found: list[dict[str, Any]] = []
        for _ in range(20):
            found += self._new_exchanges()
            if found:
                time.sleep(0.3)
                return found + self._new_exchanges()
            time.sleep(0.2)
        return found

    def report(self, session: Session) -> None:
        """A report per exchange that has something to teach, quoting its receipt: the
        session's outcome as score, the answer that would have succeeded as correction."""
        score = 1.0 if session.succeeded else 0.0
        # the first exchange should have called the tool; after a call that succeeded,
        # the next should have ended the session (a failed one's later exchanges answer
        # a conversation that went wrong: nothing to teach there)
        quoted = session.receipts[: 2 if session.succeeded else 1]
        for index, receipt in enumerate(quoted):
            correction = self.cli.correct(session.task, self.workdir) if index == 0 else DONE
            self.client.report(
                self.scenario,
                {"score": score, "feedback": {"correction": correction}},
                references=[receipt],
            )
            self.reports += 1
