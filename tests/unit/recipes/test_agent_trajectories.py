"""A real agent's exchange, as sft trains on it: the whole trajectory with its tools, the
tool call in a trained span, the tool result and the user's words outside one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recipes.rendering import IGNORE, Trajectory
from recipes.samples import sample_from_event
from recipes.sft import example_of
from reef.core.events import SampleJoined
from reef.core.events import utc_now as now
from reef_dev.chat_templates import chatml_tokenizer
from trainers.backends.torch_backend import encode_examples

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
ANSWER = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "wrote hello.txt"}],
}
CODEX_ANSWER = {
    "object": "response",
    "output": [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "wrote hello.txt", "annotations": []}],
        }
    ],
}


def _sample(route: str, request: Any, response: Any, score: float = 1.0, earlier: Any = ()) -> Any:
    trajectory = [
        *earlier,
        {
            "receipt": "r1",
            "release_id": "rel",
            "route": route,
            "request": request,
            "response": response,
        },
    ]
    event = SampleJoined(
        event_id="s1",
        scenario="sc",
        occurred_at=now(),
        producer="reef-join",
        report_id="rep",
        references=["r1"],
        trajectory_json=json.dumps(trajectory),
        score=score,
        feedback_json="null",
        metadata_json="{}",
        release_ids=["rel"],
    )
    return sample_from_event(event)


@pytest.mark.parametrize(
    ("folder", "route", "answer", "call_name"),
    [
        ("claude_code/quiet", "/v1/messages", ANSWER, "Write"),
        ("codex/exec", "/v1/responses", CODEX_ANSWER, "exec_command"),
    ],
)
def test_a_captured_agent_turn_trains_on_its_tool_call_not_its_result(
    folder: str, route: str, answer: Any, call_name: str
) -> None:
    request = json.loads((AGENTS / folder / "tool_result_request.json").read_bytes())
    example = example_of(_sample(route, request, answer), 1.0, "all")
    assert isinstance(example, Trajectory)
    assert example.tools and any(t["function"]["name"] == call_name for t in example.tools)
    tokenizer = chatml_tokenizer(["hello from wrote file_path content cmd"] * 4)
    (row,), cuts = encode_examples(tokenizer, [example], max_length=200_000)
    ids, labels = row
    trained = tokenizer.decode([i for i, lab in zip(ids, labels, strict=True) if lab != IGNORE])
    assert f'<tool_call>\n{{"name": "{call_name}"' in trained and "hello" in trained
    assert "wrote hello.txt" in trained
    result = next(m["content"] for m in example.messages if m["role"] == "tool")
    assert result and result not in trained
    assert cuts == {"context_cut_messages": 0.0, "context_cut_tokens": 0.0}
    # the default trains only the answer the feedback is about
    last = example_of(_sample(route, request, answer), 1.0)
    assert isinstance(last, Trajectory) and last.trained == (len(last.messages) - 1,)


def test_a_text_exchange_stays_a_prompt_and_a_target() -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "Return exactly: cat"}]}
    response = {"choices": [{"message": {"role": "assistant", "content": "cat"}}]}
    assert example_of(_sample("/v1/chat/completions", request, response), 1.0) == (
        [{"role": "user", "content": "Return exactly: cat"}],
        "cat",
    )
    assert example_of(_sample("/v1/chat/completions", request, response, score=0.0), 1.0) is None


def test_a_report_quoting_both_exchanges_trains_the_tool_call_and_the_answer() -> None:
    """The default (trained_turns: last) trains what the report is about: here both
    exchanges of the session, the call as the second request repeats it, and the answer."""
    folder = AGENTS / "claude_code" / "quiet"
    first = json.loads((folder / "first_request.json").read_bytes())
    second = json.loads((folder / "tool_result_request.json").read_bytes())
    call = second["messages"][-2]
    said = {"type": "message", "role": "assistant", "content": call["content"]}
    earlier = [
        {
            "receipt": "r0",
            "release_id": "rel",
            "route": "/v1/messages",
            "request": first,
            "response": said,
        }
    ]
    example = example_of(_sample("/v1/messages", second, ANSWER, earlier=earlier), 1.0)
    assert isinstance(example, Trajectory)
    roles = [example.messages[i]["role"] for i in example.trained]
    assert roles == ["assistant", "assistant"]
    assert example.messages[example.trained[0]]["tool_calls"][0]["function"]["name"] == "Write"
    alone = example_of(_sample("/v1/messages", second, ANSWER), 1.0)
    assert isinstance(alone, Trajectory) and len(alone.trained) == 1
