"""Rendering a trajectory for training: the model's template with its tools, the loss on
every assistant token (text and tool calls), never on tool results or user text."""

from __future__ import annotations

from typing import Any

import pytest

from recipes.rendering import IGNORE, Trajectory, render
from reef_dev.chat_templates import chatml_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "Write",
            "description": "Write a file",
            "parameters": {"type": "object", "properties": {"file_path": {"type": "string"}}},
        },
    }
]
CALL = {
    "type": "function",
    "id": "toolu_1",
    "function": {"name": "Write", "arguments": {"file_path": "a.txt", "content": "hi"}},
}
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "create a.txt containing hi"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "File created successfully"},
    {"role": "assistant", "content": "Done: wrote a.txt"},
]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return chatml_tokenizer(
        [
            "create a.txt containing hi",
            "File created successfully",
            "Write a file",
            "tool_call file_path content arguments name",
        ]
        * 4
    )


def _trained_text(tokenizer: Any, ids: list[int], labels: list[int]) -> str:
    return str(tokenizer.decode([i for i, lab in zip(ids, labels, strict=True) if lab != IGNORE]))


def test_the_loss_covers_the_tool_call_and_the_answer_never_the_result(tokenizer: Any) -> None:
    trajectory = Trajectory.of(MESSAGES, TOOLS, answer_from=2)
    assert trajectory.trained == (2, 4)
    rendered = render(tokenizer, trajectory, max_length=4096)
    trained = _trained_text(tokenizer, rendered.ids, rendered.labels)
    assert (
        '<tool_call>\n{"name": "Write", "arguments": {"file_path": "a.txt", "content": "hi"}}'
        in trained
    )
    assert "Done: wrote a.txt<|im_end|>" in trained
    for context in (
        "File created successfully",
        "create a.txt containing hi",
        "You are an agent",
        "<tools>",
    ):
        assert context not in trained
    whole = tokenizer.decode(rendered.ids)
    assert whole == tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, tokenize=False)
    assert [s.trained for s in rendered.segments] == [False, True, False, True]
    assert rendered.cut_messages == 0 and rendered.cut_tokens == 0


def test_last_trains_only_the_answer_the_feedback_is_about(tokenizer: Any) -> None:
    rendered = render(tokenizer, Trajectory.of(MESSAGES, TOOLS, answer_from=4), max_length=4096)
    trained = _trained_text(tokenizer, rendered.ids, rendered.labels)
    assert trained.startswith("Done: wrote a.txt") and "<tool_call>" not in trained
    every = render(tokenizer, Trajectory.of(MESSAGES, TOOLS, answer_from=4, turns="all"), 4096)
    assert every.trained_tokens > rendered.trained_tokens


def test_a_long_context_keeps_system_tools_and_the_latest_turns(tokenizer: Any) -> None:
    history: list[dict[str, Any]] = [MESSAGES[0]]
    for n in range(6):
        history += [
            {"role": "user", "content": f"old question {n} " * 20},
            {"role": "assistant", "content": f"old answer {n}"},
        ]
    messages = history + MESSAGES[1:]
    full = render(tokenizer, Trajectory.of(messages, TOOLS, answer_from=len(messages) - 1), 100_000)
    budget = len(full.ids) - 150
    cut = render(tokenizer, Trajectory.of(messages, TOOLS, answer_from=len(messages) - 1), budget)
    assert len(cut.ids) <= budget and cut.cut_messages > 0 and cut.cut_messages % 2 == 0
    assert cut.cut_tokens == 0
    text = tokenizer.decode(cut.ids)
    assert "You are an agent." in text and "<tools>" in text and "old question 5" in text
    assert "old question 0" not in text
    assert _trained_text(tokenizer, cut.ids, cut.labels) == _trained_text(
        tokenizer, full.ids, full.labels
    )
    # nothing left to drop: the oldest tokens are cut, and counted
    tight = render(tokenizer, Trajectory.of(MESSAGES, TOOLS, answer_from=4), 40)
    assert len(tight.ids) == 40 and tight.cut_tokens > 0


def test_a_template_that_rewrites_history_is_refused(tokenizer: Any) -> None:
    odd = chatml_tokenizer(
        ["x"],
        template=(
            "{% for m in messages|reverse %}{{ m.role }}:{{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}"
        ),
    )
    with pytest.raises(ValueError, match="growing text"):
        render(odd, Trajectory.of(MESSAGES, [], answer_from=4), 4096)
