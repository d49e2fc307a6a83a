"""Agent headers as tags (reef.core.agent_headers), pure: each row of the table, the
precedence between rows and over the client's own tags, and values that are refused."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reef.core.agent_headers import AGENT_HEADERS, agent_tags, body_tags, with_explicit


def tags(headers: dict[str, str]) -> dict[str, str]:
    return agent_tags({k.lower(): v for k, v in headers.items()}.get)


def test_claude_codes_session_header_names_the_session() -> None:
    found = tags({"X-Claude-Code-Session-Id": "5f0c9a8e-1b2c-4d3e-8f9a-0b1c2d3e4f5a"})
    assert found == {
        "session": "5f0c9a8e-1b2c-4d3e-8f9a-0b1c2d3e4f5a",
        "session-source": "claude-code",
    }


def test_codexs_session_thread_and_turn_metadata_become_tags() -> None:
    metadata = {
        "session_id": "s-1",
        "thread_id": "t-2",
        "turn_id": "turn-9",
        "request_kind": "turn",
        "parent_thread_id": "t-1",
        "installation_id": "never-a-tag",
        "workspaces": {"/repo": {"has_changes": True}},
    }
    found = tags(
        {
            "session-id": "s-1",
            "thread-id": "t-2",
            "x-openai-subagent": "collab_spawn",
            "x-codex-turn-metadata": json.dumps(metadata),
        }
    )
    assert found == {
        "session": "s-1",
        "thread": "t-2",
        "parent-thread": "t-1",
        "subagent": "collab_spawn",
        "turn-id": "turn-9",
        "request-kind": "turn",
        "session-source": "codex",
    }


def test_older_codex_releases_name_the_session_with_underscored_headers() -> None:
    assert tags({"session_id": "c-1", "conversation_id": "c-1"})["session"] == "c-1"
    assert tags({"conversation_id": "c-2"}) == {"session": "c-2", "session-source": "codex"}


def test_the_turn_metadata_names_the_session_when_no_header_does() -> None:
    meta = json.dumps({"session_id": "m-1", "thread_id": "m-1"})
    assert tags({"x-codex-turn-metadata": meta}) == {
        "session": "m-1",
        "thread": "m-1",
        "session-source": "codex",
    }
    both = tags({"session-id": "h-1", "x-codex-turn-metadata": meta})
    assert (both["session"], both["thread"]) == ("h-1", "m-1")


def test_a_dedicated_header_wins_over_a_later_row_for_the_same_tag() -> None:
    found = tags({"x-claude-code-session-id": "claude", "session-id": "codex"})
    assert found == {"session": "claude", "session-source": "claude-code"}


def test_the_clients_own_tags_win_and_an_explicit_session_is_not_the_agents() -> None:
    derived = tags({"x-claude-code-session-id": "agent-1", "thread-id": "t"})
    merged = with_explicit(derived, {"session": "mine", "team": "a"})
    assert merged == {"session": "mine", "thread": "t", "team": "a"}
    assert with_explicit(derived, {"team": "a"})["session-source"] == "claude-code"


def test_values_that_are_not_short_printable_ids_are_ignored() -> None:
    assert tags({"x-claude-code-session-id": "x" * 257}) == {}
    assert tags({"x-claude-code-session-id": "   "}) == {}
    assert tags({"x-claude-code-session-id": "a\x00b"}) == {}
    assert tags({"x-codex-turn-metadata": "{not json"}) == {}
    assert tags({"x-codex-turn-metadata": "[1, 2]"}) == {}
    assert tags({"x-codex-turn-metadata": json.dumps({"session_id": 7})}) == {}
    assert tags({"x-codex-turn-metadata": "[" * 60_000}) == {}  # deeper than json recurses


def test_every_row_reads_a_lowercase_header_name() -> None:
    assert all(row.header == row.header.lower() for row in AGENT_HEADERS)


header_names = st.sampled_from([row.header for row in AGENT_HEADERS] + ["x-codex-turn-metadata"])
header_values = st.one_of(
    st.text(max_size=300),
    st.dictionaries(st.sampled_from(["session_id", "thread_id", "turn_id"]), st.text()).map(
        json.dumps
    ),
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(header_names, header_values))
def test_any_headers_give_short_printable_tags_and_a_source_only_with_a_session(
    headers: dict[str, str],
) -> None:
    found = tags(headers)
    assert all(0 < len(v) <= 256 and v.isprintable() for v in found.values())
    assert ("session-source" in found) == ("session" in found)


def test_a_claude_code_subagents_agent_id_names_its_thread() -> None:
    found = tags({"x-claude-code-session-id": "cc-1", "x-claude-code-agent-id": "a55cf7"})
    assert found == {"session": "cc-1", "thread": "a55cf7", "session-source": "claude-code"}


def test_claude_codes_billing_line_marks_a_subagents_request() -> None:
    line = "x-anthropic-billing-header: cc_version=2.1.328.29b; cc_entrypoint=sdk-cli;"
    own = {"system": [{"type": "text", "text": line}, {"type": "text", "text": "You are"}]}
    sub = {"system": [{"type": "text", "text": line + " cc_is_subagent=true;"}]}
    assert body_tags(own) == {} and body_tags(sub) == {"subagent": "true"}
    quoted = {"system": [{"type": "text", "text": "You are... cc_is_subagent=true;"}]}
    assert body_tags(quoted) == {}  # only the billing line that opens the prompt counts
    assert body_tags({"system": "x-anthropic-billing-header: cc_is_subagent=true;"}) == {}
    assert body_tags([]) == {} and body_tags({"system": []}) == {}
