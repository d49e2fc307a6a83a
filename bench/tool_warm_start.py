"""The tool-use warm start: what a pretrained instruct model brings to an agent's tasks
and a folder with random weights lacks, taught on tools none of the tasks use.

A pretrained instruct model of a tool-calling family has learned, from its corpus and its
instruction tuning, to answer a request with a ``<tool_call>`` whose arguments it copies
from the request. It has not learned a given agent's tools, that agent's prompt or how a
user phrases that agent's tasks. :func:`conversations` makes such a corpus: synthetic
tools (``book_ticket(title, city)``) in the template's ``<tools>`` block, a request that
names each argument by a cue (the parameter's name or a word that goes with it:
``label bafo``, ``called bafo``, ``bafo as label``), and the call that copies the values,
sometimes followed by the tool's result and a short closing answer. No tool, parameter,
cue or phrasing of the agents' tasks (:data:`TASK_WORDS`) occurs, nor any task word: the
warm-started folder does not know that "containing" names a file's content, nor the
agents' tools, so it still fails their tasks (each loop's first round checks it).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.agent_loop import WarmPhase, tool_call, train_rows, word_pool


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


#: the words of the agents' tasks and tools, kept out of the corpus
TASK_WORDS = frozenset(
    _words(
        "create file containing write new make with text content file_path cmd"
        " exec_command echo Write"
    )
)
VERBS = _words(
    "get set send find add remove book play open move rename share schedule translate"
    " search order start stop check list"
)
NOUNS = _words(
    "alarm message song ticket event note contact photo meeting reminder weather"
    " route folder task timer page user image invoice playlist"
)
#: each parameter and the cue words a request names it by (its own name among them)
PARAMETERS: dict[str, tuple[str, ...]] = {
    "label": ("label", "named", "called"),
    "city": ("city", "at"),
    "recipient": ("recipient", "for"),
    "title": ("title", "titled"),
    "query": ("query", "about"),
    "note": ("note", "saying"),
    "body": ("body", "reading"),
    "path": ("path", "under"),
    "date": ("date", "on"),
    "tag": ("tag", "tagged"),
    "color": ("color", "colored"),
    "url": ("url", "link"),
    "owner": ("owner", "by"),
    "topic": ("topic", "regarding"),
    "folder": ("folder", "inside"),
    "language": ("language", "into"),
    "target": ("target", "toward"),
    "source": ("source", "from"),
}
SUFFIXES = (".md", ".log", ".csv", ".json", ".py", ".cfg")
RESULTS = ("ok", "Success.", "Operation completed.", "{noun} updated", "done: {value}")
CLOSING = "Done."


def vocabulary() -> list[str]:
    """The corpus's words, for the folder's tokenizer to learn as pieces."""
    return [" ".join(VERBS), " ".join(NOUNS), " ".join(c for p in PARAMETERS.values() for c in p)]


@dataclass(frozen=True)
class ToolUse:
    """One conversation of the corpus, as chat messages and tools."""

    messages: list[dict[str, str]]
    tools: list[dict[str, Any]]


def conversations(
    rng: random.Random, words: Sequence[str], filler: Callable[[], str]
) -> Callable[[], ToolUse]:
    """A maker of corpus conversations: values drawn from ``words``, system and user text
    padded by ``filler``."""
    assert not TASK_WORDS & {*VERBS, *NOUNS, *PARAMETERS}

    def value() -> str:
        draw = rng.random()
        if draw < 0.2:
            return f"{rng.choice(words)} {rng.choice(words)}"
        if draw < 0.45:
            return rng.choice(words) + rng.choice(SUFFIXES)
        if draw < 0.55:
            return f"/{rng.choice(words)}/{rng.choice(words)}{rng.choice(SUFFIXES)}"
        return rng.choice(words)

    def tool() -> tuple[str, list[str]]:
        name = f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"
        return name, rng.sample(sorted(PARAMETERS), rng.randint(1, 3))

    def schema(name: str, params: list[str]) -> dict[str, Any]:
        properties = {p: {"type": "string", "description": f"The {p}."} for p in params}
        verb, noun = name.split("_")
        return {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{verb.capitalize()} a {noun}.",
                "parameters": {"type": "object", "properties": properties, "required": params},
            },
        }

    def make() -> ToolUse:
        offered: dict[str, list[str]] = {}
        # the bound drawn again each time: one, two or three tools (1/3, 4/9, 2/9)
        while len(offered) < rng.randint(1, 3):
            name, params = tool()
            offered[name] = params
        called = rng.choice(sorted(offered))
        arguments = {p: value() for p in offered[called]}
        cues = []
        for param, text in arguments.items():
            cue = rng.choice(PARAMETERS[param])
            cues.append(f"{text} as {cue}" if rng.random() < 0.25 else f"{cue} {text}")
        rng.shuffle(cues)
        verb, noun = called.split("_")
        request = f"{verb} {rng.choice(['the', 'a', 'my'])} {noun} " + ", ".join(cues)
        before = filler()
        messages = [
            {"role": "system", "content": filler() or "You are a helpful assistant."},
            {"role": "user", "content": f"{before}\n{request}" if before else request},
            {"role": "assistant", "content": tool_call(called, arguments)},
        ]
        if rng.random() < 0.4:
            result = rng.choice(RESULTS).format(noun=noun, value=next(iter(arguments.values())))
            messages += [
                {"role": "tool", "content": result},
                {"role": "assistant", "content": CLOSING},
            ]
        return ToolUse(messages, [schema(n, p) for n, p in offered.items()])

    return make


def rendered_rows(tokenizer: Any, use: ToolUse, context: int) -> tuple[list[int], list[bool]]:
    """Token ids of the conversation as the folder's template renders it, and which of
    them are trained (the assistant's answers and their end)."""
    ids: list[int] = []
    trained: list[bool] = []
    done = ""
    for k, message in enumerate(use.messages):
        if message["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(
            use.messages[:k], tools=use.tools, add_generation_prompt=True, tokenize=False
        )
        piece = tokenizer(prompt[len(done) :], add_special_tokens=False)["input_ids"]
        answer = tokenizer(message["content"] + "<|im_end|>\n", add_special_tokens=False)
        ids += piece + answer["input_ids"]
        trained += [False] * len(piece) + [True] * len(answer["input_ids"])
        done = prompt + message["content"] + "<|im_end|>\n"
    return ids[-context:], trained[-context:]


def warm_tools(
    folder: Path,
    avoid: Sequence[str],
    phase: WarmPhase,
    *,
    device: str,
    texts: Sequence[str] = (),
    seed: int = 11,
) -> float:
    """Pretrain the folder's weights on tool use (:func:`conversations`): values are
    pseudo-words none of which is in ``avoid``; filler is pseudo-words or a window of the
    words of ``texts``. Overwrites the folder's weights; returns the last batch's loss."""
    seed += phase.seed
    rng = random.Random(seed)
    pool = word_pool(avoid, seed)
    text = " ".join(texts).split()

    def filler() -> str:
        count = rng.randint(0, phase.filler)
        if phase.text_share and text and rng.random() < phase.text_share:
            start = rng.randint(0, max(0, len(text) - count))
            return " ".join(text[start : start + count])
        return " ".join(rng.choice(pool) for _ in range(count))

    make = conversations(rng, pool, filler)
    return train_rows(folder, phase, device, lambda tok, ctx: rendered_rows(tok, make(), ctx))


#: the tool-use warm start of tests/fixtures/agent_model (hidden 64, 2 layers;
#: docs/benchmarks/agents.md): prompts of up to 20 filler words each side, whose copying
#: carries to the agents' far longer prompts
TOOLS_WARM_START = (WarmPhase(1500, 20, 24, 2e-3), WarmPhase(1500, 20, 24, 2e-3, seed=10))
