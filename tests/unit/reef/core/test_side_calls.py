"""Side calls by their shape (reef.core.side_calls), pure: each kind once, and what is a
turn. The bodies follow the shapes Claude Code and Codex send (their compaction, title,
quota and warm-up requests); the markers are the agents' own prompt texts."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reef.core.agent_headers import body_tags
from reef.core.side_calls import history_tags, side_kind, side_tags

TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]
SYSTEM = [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."}]
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "fix the failing test"},
    {"role": "assistant", "content": [{"type": "text", "text": "Looking at it."}]},
]
SUMMARY_ASK = (
    "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\n"
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions."
)


def anthropic(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 4096, "system": SYSTEM, "messages": messages} | extra


def test_a_main_turn_is_no_side_call() -> None:
    assert side_kind(anthropic(HISTORY, tools=TOOLS), {}) is None
    assert side_kind({"input": [{"type": "message", "role": "user", "content": "hi"}]}, {}) is None
    assert side_kind("not an object", {}) is None


def test_claude_codes_compaction_sharing_the_conversations_prefix_is_compaction() -> None:
    ask = {"role": "user", "content": [{"type": "text", "text": SUMMARY_ASK}]}
    assert side_kind(anthropic([*HISTORY, ask], tools=TOOLS), {}) == "compaction"
    plain = {"role": "user", "content": SUMMARY_ASK}
    assert side_kind(anthropic([*HISTORY, plain]), {}) == "compaction"


def test_claude_codes_summariser_system_prompt_is_compaction() -> None:
    system = "You are a helpful AI assistant tasked with summarizing conversations."
    assert side_kind(anthropic(HISTORY, system=system), {}) == "compaction"


def test_a_summary_instruction_deep_inside_a_message_is_not_a_marker() -> None:
    buried = {"role": "user", "content": "x" * 5000 + SUMMARY_ASK}
    assert side_kind(anthropic([*HISTORY, buried], tools=TOOLS), {}) is None


def test_codex_marks_its_compaction_memory_and_prewarm_requests() -> None:
    trigger = {"input": [{"type": "message", "role": "user"}, {"type": "compaction_trigger"}]}
    assert side_kind(trigger, {}) == "compaction"
    assert side_kind({}, {"subagent": "compact"}) == "compaction"
    assert side_kind({}, {"subagent": "memory_consolidation"}) == "memory"
    assert side_kind({}, {"request-kind": "compaction"}) == "compaction"
    assert side_kind({}, {"request-kind": "prewarm"}) == "prewarm"
    assert side_kind({}, {"request-kind": "turn"}) is None
    assert side_kind({}, {"subagent": "review"}) is None  # a subagent's real work


def test_claude_codes_title_prompts_are_titles() -> None:
    topic = (
        "Analyze if this message indicates a new conversation topic. If it does, extract "
        "a 2-3 word title that captures the new topic."
    )
    system = [*SYSTEM, {"type": "text", "text": topic}]
    assert side_kind(anthropic([{"role": "user", "content": "hi"}], system=system), {}) == "title"


def test_the_quota_probe_and_the_warmup_are_told_apart_from_a_short_question() -> None:
    quota = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "quota"}]}
    assert side_kind(quota, {}) == "quota"
    assert side_kind({**quota, "max_tokens": 100}, {}) is None
    warmup = anthropic([{"role": "user", "content": [{"type": "text", "text": "Warmup"}]}])
    assert side_kind(warmup, {}) == "warmup"
    assert side_kind(anthropic([*HISTORY, {"role": "user", "content": "Warmup"}]), {}) is None


def test_side_tags_name_the_type_and_the_kind() -> None:
    assert side_tags("title") == {"turn-type": "side", "side-kind": "title"}


CONTINUED = (
    "This session is being continued from a previous conversation that ran out of "
    "context. The summary below covers the earlier portion of the conversation."
)


def test_a_history_that_says_it_was_compacted_is_tagged_so() -> None:
    reminder = {"type": "text", "text": "<system-reminder>project notes</system-reminder>"}
    opening = {"role": "user", "content": [reminder, {"type": "text", "text": CONTINUED}]}
    assert history_tags(anthropic([opening, *HISTORY])) == {"history": "compacted"}
    assert history_tags(anthropic([{"role": "user", "content": CONTINUED}])) == {
        "history": "compacted"
    }
    later = [*HISTORY, {"role": "user", "content": CONTINUED}]  # not the opening message
    assert history_tags(anthropic(later)) == {}
    assert history_tags(anthropic(HISTORY)) == {} and history_tags([]) == {}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["system", "messages", "input", "content", "text", "role", "type"]),
            inner,
            max_size=5,
        )
    ),
    max_leaves=30,
)
KINDS = {None, "compaction", "memory", "prewarm", "title", "quota", "warmup"}


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, st.dictionaries(st.sampled_from(["request-kind", "subagent"]), st.text()))
def test_any_body_is_classified_without_an_error(body: Any, tags: dict[str, str]) -> None:
    assert side_kind(body, tags) in KINDS
    assert history_tags(body) in ({}, {"history": "compacted"})
    assert body_tags(body) in ({}, {"subagent": "true"})
