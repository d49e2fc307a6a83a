"""The reflection request: one harness component and the minibatch's evidence.

The reflection model sees the component's current text inside a fenced block, then one
record per minibatch example (the task as given, the agent's output, its score and the
feedback text) and is asked for the whole new text of that component inside one fenced
block. The last fenced block of the answer is the new text (an answer without a fence
is taken whole); an empty or unchanged text fails the step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from recipes.errors import TrainingError

#: first line of the reflection request's system prompt (a scripted world recognises it)
REFLECTION_MARKER = "You are Reef's GEPA reflector."

_INSTRUCTIONS = (
    f"{REFLECTION_MARKER}\n"
    "An agent works with a harness: text files that make its system prompt. You are shown "
    "one of those files and a few tasks the agent did under it: the task, the agent's "
    "output, the score it earned and feedback about it. Find what the file should tell "
    "the agent so that it earns higher scores on tasks like these (state general rules, "
    "not answers to the tasks shown), and keep what already works. Answer with the "
    "complete new text of the file inside one ``` fenced block."
)
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.S)


@dataclass(frozen=True, slots=True)
class Example:
    """One minibatch record as the reflection model sees it."""

    task: str
    output: str
    score: float
    feedback: str


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more]"


def reflection_messages(
    path: str, text: str, examples: Sequence[Example], *, max_chars: int
) -> list[dict[str, str]]:
    lines = [f"# The file: {path}", "```", text.rstrip("\n"), "```", "# Examples"]
    for number, example in enumerate(examples, 1):
        lines += [
            f"## Example {number}",
            "### Inputs",
            _cut(example.task, max_chars),
            "### Generated Outputs",
            _cut(example.output, max_chars),
            "### Score",
            f"{example.score:g}",
            "### Feedback",
            _cut(example.feedback, max_chars),
        ]
    return [
        {"role": "system", "content": _INSTRUCTIONS},
        {"role": "user", "content": "\n".join(lines)},
    ]


def read_rewrite(reply: str, current: str, *, max_chars: int) -> str:
    """The new component text from the reflection's answer; TrainingError if unusable."""
    blocks = _FENCE.findall(reply)
    text = (blocks[-1] if blocks else reply).strip()
    if not text:
        raise TrainingError("the reflection answered no text")
    if len(text) > max_chars:
        raise TrainingError(f"the reflection's text has {len(text)} characters (limit {max_chars})")
    if text == current.strip():
        raise TrainingError("the reflection left the component unchanged")
    return text + "\n"
