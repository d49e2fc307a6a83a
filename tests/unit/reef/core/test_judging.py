"""The judge's pure rules (reef.core.judging): votes, plurality, hints, the turn it reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reef.core import judging
from reef.core.judging import TurnView, decide, parse_hint, parse_vote, plurality


@pytest.mark.parametrize(
    ("reply", "vote"),
    [
        ("fine \\boxed{1}", 1),
        ("\\boxed{+1}", 1),
        ("\\boxed{ -1 }", -1),
        ("\\boxed{0}", 0),
        ("first \\boxed{1} then, on reflection, \\boxed{-1}", -1),  # the last box counts
        ("\\boxed{2}", None),
        ("\\boxed{yes}", None),
        ("no box at all: +1", None),
        ("", None),
    ],
)
def test_a_vote_is_the_last_boxed_value(reply: str, vote: int | None) -> None:
    assert parse_vote(reply) == vote


@pytest.mark.parametrize(
    ("votes", "score"),
    [
        ([1, 1, -1], 1),
        ([-1, -1, 1], -1),
        ([0, 0, 1], 0),
        ([1, None, None], 1),  # invalid votes do not count
        ([1, -1, 0], 0),  # a three-way tie
        ([1, -1, None], 0),  # a tie at the top
        ([1, 1, -1, -1, 0], 0),
        ([None, None, None], 0),  # no valid vote
        ([], 0),
    ],
)
def test_plurality_of_valid_votes_ties_and_none_are_zero(
    votes: list[int | None], score: int
) -> None:
    assert plurality(votes) == score


def test_decide_reads_m_replies_and_counts_invalid_ones() -> None:
    decision = decide(["\\boxed{-1}", "garbage", "\\boxed{-1}"])
    assert (decision.votes, decision.score, decision.valid_votes) == ((-1, None, -1), -1, [-1, -1])


def hinted(text: str, vote: int = 1) -> str:
    return f"\\boxed{{{vote}}} [HINT_START]{text}[HINT_END]"


def test_hints_are_accepted_votes_of_one_deduplicated_shortest_first() -> None:
    replies = [
        hinted("Check the units before answering."),
        hinted("Say   the unit."),  # whitespace folded
        hinted("Check the units before answering."),  # a duplicate
        hinted("too short"),  # not longer than 10 characters
        hinted("A hint under a vote of -1 is declined.", vote=-1),
        "\\boxed{1} with no hint block",
        hinted("Answer in metres, as the user asked."),
    ]
    assert decide(["\\boxed{1}"], replies, max_hints=2).hints == (
        "Say the unit.",
        "Check the units before answering.",
    )
    assert parse_hint(hinted("too short")) is None


def test_the_turn_read_from_openai_bodies_ends_with_the_next_state() -> None:
    request = {"messages": [{"role": "user", "content": "2+2?"}]}
    response = {"choices": [{"message": {"role": "assistant", "content": "5"}}]}
    following = {
        "messages": [
            *request["messages"],
            {"role": "assistant", "content": "5"},
            {"role": "user", "content": "no, it is 4"},
        ]
    }
    assert judging.turn_view(request, response, following) == TurnView(
        (("user", "2+2?"),), "5", "user", "no, it is 4"
    )


def test_anthropic_tool_use_and_tool_results_are_read_as_text() -> None:
    request = {"system": "be brief", "messages": [{"role": "user", "content": "look it up"}]}
    use = {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "x"}}
    response = {"type": "message", "content": [{"type": "text", "text": "searching"}, use]}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "found it"}
    following = {"messages": [{"role": "user", "content": [result]}]}
    view = judging.turn_view(request, response, following)
    assert view is not None
    assert view.messages == (("system", "be brief"), ("user", "look it up"))
    assert view.answer == 'searching\n[tool_call: search({"q": "x"})]'
    assert (view.next_role, view.next_text) == ("tool", "found it")


def test_a_turn_without_an_answer_or_next_state_is_not_judged() -> None:
    request = {"messages": [{"role": "user", "content": "hi"}]}
    assert judging.turn_view(request, None, request) is None
    answer = {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}
    assert judging.turn_view(request, answer, {"messages": []}) is None


def test_the_prompt_shows_the_next_state_between_its_markers() -> None:
    view = TurnView((("user", "2+2?"),), "5", "user", "no, it is 4")
    system, user = judging.judge_prompt(view)
    assert system["content"].startswith(judging.JUDGE_MARKER)
    assert user["content"].endswith(
        f"{judging.NEXT_STATE_OPEN}\nno, it is 4\n{judging.NEXT_STATE_CLOSE}"
    )
    assert judging.hint_prompt(view)[0]["content"].startswith(judging.HINT_MARKER)


def test_a_codex_turn_is_read_from_responses_items() -> None:
    """The Responses API (Codex): the call is an output item, its result an input item."""
    folder = Path(__file__).resolve().parents[3] / "fixtures" / "agents" / "codex" / "exec"
    request = json.loads((folder / "first_request.json").read_bytes())
    following = json.loads((folder / "tool_result_request.json").read_bytes())
    call = next(i for i in following["input"] if i.get("type") == "function_call")
    response = {"object": "response", "output": [call]}
    view = judging.turn_view(request, response, following, "/v1/responses")
    assert view is not None
    assert view.answer == f"[tool_call: exec_command({call['arguments']})]"
    assert view.next_role == "tool" and "exited with code 0" in view.next_text
    assert "user" in [role for role, _ in view.messages]
