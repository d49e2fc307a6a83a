"""Request bodies shaped like a coding agent's session (Claude Code on ``/v1/messages``).

Every turn resends the whole context: a system prompt and tool schemas of about 50 KB,
then every message so far. The agent reads files and runs commands, so each turn adds an
assistant message (text and a ``tool_use``) and a user message (the ``tool_result``), and
the cache breakpoint (``cache_control``) moves to the newest message, as Claude Code
moves it: the message that carried it the turn before is resent without it.

Deterministic in ``seed``: tests and benchmarks rebuild the same session.
"""

from __future__ import annotations

import json
import random
from typing import Any

MODEL = "claude-sonnet-4-5-20250929"
TOOL_NAMES = [
    "Task",
    "Bash",
    "Glob",
    "Grep",
    "LS",
    "ExitPlanMode",
    "Read",
    "Edit",
    "MultiEdit",
    "Write",
    "NotebookEdit",
    "WebFetch",
    "TodoWrite",
    "WebSearch",
    "BashOutput",
    "KillShell",
    "SlashCommand",
]
_WORDS = [
    "the",
    "file",
    "function",
    "return",
    "value",
    "error",
    "test",
    "module",
    "import",
    "class",
    "self",
    "request",
    "response",
    "session",
    "record",
    "body",
    "key",
    "store",
    "log",
    "event",
    "scenario",
    "agent",
    "tool",
    "result",
    "message",
    "content",
    "system",
    "prompt",
    "user",
    "assistant",
    "when",
    "then",
    "only",
    "never",
    "always",
    "each",
    "read",
    "write",
    "append",
    "erase",
    "seal",
    "open",
    "block",
    "index",
    "path",
    "line",
    "code",
    "change",
    "commit",
    "run",
]
_CACHE = {"type": "ephemeral"}


def _prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _code(rng: random.Random, lines: int) -> str:
    out = []
    for n in range(lines):
        name = f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}"
        out.append(f"{n + 1:>6}\u2192    {name} = {rng.choice(_WORDS)}({rng.randrange(1000)})")
    return "\n".join(out)


def system_blocks(rng: random.Random) -> list[dict[str, Any]]:
    """The agent's system prompt: an identity line and about 14 KB of instructions."""
    return [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {"type": "text", "text": _prose(rng, 2300), "cache_control": _CACHE},
    ]


def tool_schemas(rng: random.Random) -> list[dict[str, Any]]:
    """Seventeen tool schemas with long descriptions (about 36 KB)."""
    tools = []
    for name in TOOL_NAMES:
        tools.append(
            {
                "name": name,
                "description": _prose(rng, 330),
                "input_schema": {
                    "type": "object",
                    "properties": {
                        word: {"type": "string", "description": _prose(rng, 12)}
                        for word in rng.sample(_WORDS, 3)
                    },
                    "required": [],
                    "additionalProperties": False,
                    "$schema": "http://json-schema.org/draft-07/schema#",
                },
            }
        )
    return tools


class AgentSession:
    """One agent session: :meth:`request` is turn ``n``'s body, each resending the last."""

    def __init__(
        self,
        seed: int = 7,
        *,
        first_prompt: str = "fix the failing test",
        captured: dict[str, Any] | None = None,
    ) -> None:
        """``captured``: a request an agent really sent, whose system prompt and tool
        schemas the session uses instead of generated ones."""
        self._rng = random.Random(seed)  # noqa: S311 (test data, not secrets)
        self.session_id = f"{self._rng.getrandbits(128):032x}"
        self.system: Any = system_blocks(self._rng)
        self.tools: Any = tool_schemas(self._rng)
        if captured is not None:
            self.system, self.tools = captured["system"], captured["tools"]
        reminder = "<system-reminder>" + _prose(self._rng, 120) + "</system-reminder>"
        self.messages: list[dict[str, Any]] = [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": reminder},
                    {"type": "text", "text": first_prompt},
                ],
            }
        ]

    def request(self) -> dict[str, Any]:
        """The next request: the whole context, the cache breakpoint on the newest message."""
        messages = [dict(m) for m in self.messages]
        last = messages[-1]
        last["content"] = [*last["content"][:-1], {**last["content"][-1], "cache_control": _CACHE}]
        return {
            "model": MODEL,
            "max_tokens": 32000,
            "system": self.system,
            "tools": self.tools,
            "messages": messages,
            "metadata": {"user_id": f"user_{'0' * 64}_account__session_{self.session_id}"},
            "stream": True,
        }

    def body(self) -> bytes:
        """:meth:`request` as the agent sends it (compact JSON, UTF-8)."""
        return json.dumps(self.request(), separators=(",", ":"), ensure_ascii=False).encode()

    def respond(self, turn: int) -> dict[str, Any]:
        """The assistant's answer to the latest request (a tool call), appended with its
        tool result to the context; the response body is returned."""
        tool_id = f"toolu_{self._rng.getrandbits(96):024x}"
        answer = [
            {"type": "text", "text": _prose(self._rng, 25)},
            {
                "type": "tool_use",
                "id": tool_id,
                "name": self._rng.choice(("Read", "Bash", "Grep", "Edit")),
                "input": {"file_path": f"/repo/src/{self._rng.choice(_WORDS)}_{turn}.py"},
            },
        ]
        self.messages.append({"role": "assistant", "content": answer})
        result = _code(self._rng, self._rng.randrange(20, 60))
        self.messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": result}],
            }
        )
        return {
            "id": f"msg_{self._rng.getrandbits(96):024x}",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": answer,
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 4, "output_tokens": 120},
        }
