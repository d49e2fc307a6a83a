"""The closed loop with the real agent CLIs, on the CPU: Claude Code and Codex, served
by Reef from a real-architecture folder, learn single-tool tasks from their own sessions.

One probe session per CLI against a capturing stand-in gives the request the CLI sends
(a short system prompt, one tool; bench/agent_loop.py). One Qwen2 folder serves every
CLI, as one pretrained model would: random weights, a tokenizer trained on the probed
requests and the syllables of the task words, then ``--warm-start`` (``tools``:
bench/tool_warm_start.py) - or ``--folder``, an earlier run's. ``reef serve`` (embedded
log) serves it through its engine (``qwen25`` tool-call parser), hot-loads the
scenario's releases and runs the in-process ``sft`` trainer. Each round measures
held-out success (sessions on tasks never trained on, checked on disk), then runs
training sessions; a checker reports each session's outcome quoting its receipts with
``reef_client`` (score 1/0, and as correction the answer that would have succeeded in
the model's tool-call syntax); the trainer trains a candidate, the gate (win_margin on
rendered held-out prompts) decides, the chain releases, the engine hot-loads. Printed
per CLI (and with ``--results``, written as JSON): held-out success per release,
sessions and reports used, wall time and the receipts' release ids.

    .venv/bin/python -m bench.agents --cli claude --cli codex --warm-start tools
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.agent_loop import (
    CLIS,
    COPY_WARM_START,
    PHRASES,
    Checker,
    Cli,
    Session,
    Task,
    build_folder,
    probe,
    request_texts,
    task_sets,
    warm_copy,
    with_codex_sandbox,
)
from bench.tool_warm_start import TOOLS_WARM_START, warm_tools
from bench.tool_warm_start import vocabulary as tool_vocabulary
from reef.core.dialogue.chat_template import template_messages, template_tools
from reef.core.dialogue.records import conversation_of
from reef.testing.servers import start_reef

TOKEN = "reef-agents-bench"
PROBE_PROMPT = "create a file probe.txt containing probe"
ROUTES = {"claude": "/v1/messages", "codex": "/v1/responses"}


@dataclass
class Round:
    release: str
    success: float
    served_by: list[str]
    sessions: int
    reports: int
    seconds: float


@dataclass
class Result:
    cli: str
    prompt_tokens: int
    rounds: list[Round] = field(default_factory=list)
    session_seconds: list[float] = field(default_factory=list)


def rendered_prompt(body: dict[str, Any], route: str, prompt: str, folder: Path) -> tuple[str, str]:
    """(system, user) text of ``body`` with its prompt replaced, as the engine renders it
    (tools in the system turn): a gate task rendered without tools gives the same text."""
    from transformers import AutoTokenizer

    text = json.dumps(body).replace(json.dumps(PROBE_PROMPT)[1:-1], json.dumps(prompt)[1:-1])
    conversation = conversation_of(json.loads(text), route)
    assert conversation is not None
    messages = template_messages(conversation.flat())
    tools = template_tools(conversation.tools)
    tokenizer: Any = AutoTokenizer.from_pretrained(folder)
    whole: str = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    system, _, rest = whole.removeprefix("<|im_start|>system\n").partition(
        "<|im_end|>\n<|im_start|>user\n"
    )
    user = rest.removesuffix("<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>" not in user, "the gate renders a system and a user turn only"
    return system, user


def prompt_tokens(body: dict[str, Any], route: str, folder: Path) -> int:
    from transformers import AutoTokenizer

    system, user = rendered_prompt(body, route, PROBE_PROMPT, folder)
    tokenizer: Any = AutoTokenizer.from_pretrained(folder)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def write_recipe(
    work: Path, cli: Cli, body: dict[str, Any], folder: Path, gate: list[Task], args: Any
) -> Path:
    route = ROUTES[cli.name]
    workdir = workdir_of(cli, work)
    lines = []
    for task in gate:
        system, user = rendered_prompt(body, route, task.prompt, folder)
        answer = cli.correct(task, workdir)
        lines.append(json.dumps({"system": system, "prompt": user, "answer": answer}))
    tasks = work / f"{cli.name}-gate.jsonl"
    tasks.write_text("\n".join(lines) + "\n")
    config = work / f"{cli.name}-recipe.yaml"
    config.write_text(
        "recipe:\n"
        f"  evaluation: {{tasks_file: '{tasks}', max_new_tokens: 64}}\n"
        f"  gate: {{policy: win_margin, margin: 0.0}}\n"
        "  batching: {batch_size: 10000, max_wait_s: 8}\n"
        "  eligibility: {max_staleness: 3}\n"
        f"  training: {{base_model: '{folder}', steps: {args.steps}, "
        f"learning_rate: {args.lr}, max_length: {args.context}, device: {args.device}, "
        f"threads: 2, micro_batch_tokens: {args.micro_batch_tokens}}}\n"
    )
    return config


def head_and_served(base_url: str, scenario: str) -> tuple[str | None, str | None]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    status = httpx.get(f"{base_url}/reef/status", headers=headers, timeout=30).json()
    found = status.get("scenarios", {}).get(scenario)
    if not found:
        return None, None
    return found.get("head_release_id"), found.get("engines", {}).get("local", {}).get("release_id")


def wait_on_head(base_url: str, scenario: str, timeout: float = 120.0) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        head, served = head_and_served(base_url, scenario)
        if head is not None and head == served:
            return head
        time.sleep(0.5)
    return None


def wait_decided(base_url: str, reports: int, timeout: float = 900.0) -> None:
    """The in-process trainer read a sample per report and decided every one of them
    (trained, gated and released or rejected: none pending)."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = httpx.get(f"{base_url}/reef/status", headers=headers, timeout=30).json()
        trainer = status.get("trainer") or {}
        if trainer.get("error"):
            raise RuntimeError(f"the trainer failed: {trainer['error']}")
        if trainer.get("samples_read", 0) >= reports and not trainer.get("samples_pending"):
            return
        time.sleep(1.0)
    raise RuntimeError(f"the trainer did not decide {reports} samples in {timeout:.0f}s")


#: each --warm-start: how a phase trains the folder, and the phases
WARM_STARTS = {"copy": (warm_copy, COPY_WARM_START), "tools": (warm_tools, TOOLS_WARM_START)}


def prepared_folder(
    clis: Sequence[Cli],
    work: Path,
    workdirs: Sequence[Path],
    probe_bodies: Sequence[dict[str, Any]],
    train: list[Task],
    held_out: list[Task],
    args: Any,
) -> Path:
    """The folder the loop starts from, one for every CLI as one pretrained model would
    be: built on the probed requests (and the calls in the CLIs' ``workdirs``), then
    the phases of ``--warm-start``."""
    # the phrasings and a call with their words left out: the tokenizer learns the
    # words' syllables (bench.agent_loop.SYLLABLES), never the words
    texts = [phrase.format(name="", word="") for phrase in PHRASES]
    texts += [
        cli.correct(Task(".txt", "", PHRASES[0]), workdir)
        for cli, workdir in zip(clis, workdirs, strict=True)
    ]
    if args.warm_start == "tools":
        texts += tool_vocabulary()
    folder = build_folder(
        work / "folder",
        probe_bodies,
        texts,
        hidden=args.hidden,
        layers=args.layers,
        context=args.context,
    )
    words = [w for t in [*train, *held_out] for w in (t.word, t.name.removesuffix(".txt"))]
    request = [text for body in probe_bodies for text in request_texts(body)]
    warm, phases = WARM_STARTS.get(args.warm_start, (warm_copy, ()))
    for phase in phases:
        started = time.monotonic()
        loss = warm(folder, words, phase, device=args.device, texts=request)
        print(
            f"{args.warm_start} warm start, {phase} on {args.device} in "
            f"{time.monotonic() - started:.0f}s, last loss {loss:.3f}",
            flush=True,
        )
    return folder


def workdir_of(cli: Cli, work: Path) -> Path:
    """Where ``cli`` runs its sessions: the probe's and the checker's directory."""
    return work / f"{cli.name}-workdir"


def probed(cli: Cli, work: Path) -> dict[str, Any]:
    """The request ``cli`` sends for :data:`PROBE_PROMPT` (kept in ``work``)."""
    kept = work / "probe.json"
    if not kept.exists():
        work.mkdir(parents=True, exist_ok=True)
        body = probe(cli, PROBE_PROMPT, workdir_of(cli, work), work / "probe-home")
        kept.write_text(json.dumps(body))
    return dict(json.loads(kept.read_text()))


def run_cli(cli: Cli, work: Path, folder: Path, args: Any) -> Result:
    if args.measure + args.gate_tasks > args.held_out:
        raise SystemExit(
            "--measure and --gate-tasks take distinct held-out tasks: raise --held-out"
        )
    train, held_out = task_sets(args.train_tasks, args.held_out)
    gate = held_out[args.measure :][: args.gate_tasks]
    measure = held_out[: args.measure]
    probe_body = probed(cli, work)
    route = ROUTES[cli.name]
    result = Result(cli.name, prompt_tokens(probe_body, route, folder))
    print(f"{cli.name}: prompt {result.prompt_tokens} tokens", flush=True)
    config = write_recipe(work, cli, probe_body, folder, gate, args)
    scenario = f"agents-{cli.name}"
    env = {
        "REEF_TOKEN": TOKEN,
        "REEF_RECIPE": "sft",
        "REEF_RECIPE_CONFIG": str(config),
        "REEF_ENGINE_SCENARIO": scenario,
        "REEF_ENGINE_MODEL": str(folder),
        "REEF_ENGINE_TOOL_CALL_PARSER": "qwen25",
        "REEF_ENGINE_DEVICE": args.device,
    }
    rng = random.Random(7)
    started = time.monotonic()
    deploy = work / f"{cli.name}-deploy"
    server = start_reef([], env=env, state_dir=deploy / "state", timeout=240.0, name="reef-agents")
    try:
        checker = Checker(cli, server.base_url, TOKEN, scenario, work)
        for round_no in range(args.rounds + 1):
            head = wait_on_head(server.base_url, scenario) if round_no else None
            sessions = [checker.run(task) for task in measure]
            if round_no == 0:
                first = sessions[0]
                print(
                    f"{cli.name}: first session {first.seconds:.1f}s exit {first.returncode}"
                    f" prompt tokens {first.prompt_tokens} answers "
                    f"{json.dumps(first.responses)[:600]}",
                    flush=True,
                )
            result.session_seconds += [s.seconds for s in sessions]
            served = sorted({r for s in sessions for r in s.releases if r})
            success = sum(s.succeeded for s in sessions) / len(sessions)
            release = head or (served[0] if served else "?")
            result.rounds.append(
                Round(
                    release,
                    success,
                    served,
                    checker.sessions,
                    checker.reports,
                    time.monotonic() - started,
                )
            )
            print(
                f"{cli.name}: round {round_no}: release {release[:12]} held-out "
                f"{success:.2f} served by {[r[:12] for r in served]} "
                f"({checker.sessions} sessions, {checker.reports} reports, "
                f"{time.monotonic() - started:.0f}s)",
                flush=True,
            )
            if success >= args.target or round_no == args.rounds:
                break
            if time.monotonic() - started > args.budget_s:
                print(f"{cli.name}: out of time budget", flush=True)
                break
            batch = rng.sample(train, args.sessions)
            trained: list[Session] = []
            for task in batch:
                trained.append(checker.run(task))
            for session in trained:  # in a burst: the batch is what came before a pause
                checker.report(session)
            ok = sum(s.succeeded for s in trained)
            print(f"{cli.name}: trained on {len(trained)} sessions ({ok} succeeded)", flush=True)
            wait_decided(server.base_url, checker.reports)
    finally:
        server.stop()
    return result


def table(results: list[Result]) -> str:
    lines = [
        "| CLI | round | release | held-out success | sessions | reports | wall s |"
        " receipts' releases |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for i, rnd in enumerate(r.rounds):
            lines.append(
                f"| {r.cli} | {i} | `{rnd.release[:12]}` | {rnd.success:.2f} | {rnd.sessions} |"
                f" {rnd.reports} | {rnd.seconds:.0f} | "
                + ", ".join(f"`{x[:12]}`" for x in rnd.served_by)
                + " |"
            )
    return "\n".join(lines)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", action="append", choices=sorted(CLIS))
    parser.add_argument("--train-tasks", type=int, default=300)
    parser.add_argument("--held-out", type=int, default=30)
    parser.add_argument("--measure", type=int, default=10, help="held-out sessions per round")
    parser.add_argument("--gate-tasks", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=32, help="training sessions per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument(
        "--context", type=int, default=4096, help="the folder's window (bounds an answer)"
    )
    parser.add_argument(
        "--warm-start",
        choices=["none", *WARM_STARTS],
        default="none",
        help="copy: the folder learns to copy first (bench.agent_loop.COPY_WARM_START);"
        " tools: to call tools none of the tasks use (bench.tool_warm_start)",
    )
    parser.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=65536,
        help="padded tokens per forward pass: one micro-batch computes the shared prompt once",
    )
    parser.add_argument(
        "--folder",
        type=Path,
        default=None,
        help="start from this folder (an earlier run's, warm start included), not a new one",
    )
    parser.add_argument(
        "--prepare-only",
        action="store_true",
        help="build the folder (probes, tokenizer, warm start) in the work directory and stop",
    )
    parser.add_argument("--device", default="cpu", help="engine and training: cpu or cuda")
    parser.add_argument(
        "--codex-sandbox",
        default="workspace-write",
        help="codex exec --sandbox (danger-full-access where Linux sandboxing is unavailable)",
    )
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--budget-s", type=float, default=900.0)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--results", type=Path, help="also write the results here, as JSON")
    return parser


def main() -> None:
    args = arguments().parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="reef-agents-"))
    clis = [CLIS[name] for name in args.cli or ["claude", "codex"]]
    clis = [with_codex_sandbox(c, args.codex_sandbox) if c.name == "codex" else c for c in clis]
    folder = args.folder
    if folder is None:
        train, held_out = task_sets(args.train_tasks, args.held_out)
        bodies = [probed(cli, work / cli.name) for cli in clis]
        workdirs = [workdir_of(cli, work / cli.name) for cli in clis]
        folder = prepared_folder(clis, work, workdirs, bodies, train, held_out, args)
    print(f"folder: {folder}", flush=True)
    if args.prepare_only:
        return
    results = [run_cli(cli, work / cli.name, folder, args) for cli in clis]
    if args.results:
        args.results.write_text(json.dumps([asdict(r) for r in results], indent=1))
    print(table(results))
    for r in results:
        mean = sum(r.session_seconds) / max(1, len(r.session_seconds))
        print(f"{r.cli}: prompt {r.prompt_tokens} tokens, {mean:.1f} s per session")


if __name__ == "__main__":
    main()
