"""Claude Code and Codex served by Reef's own engine: ``reef serve`` with no upstream starts
``reef engine`` on the built-in tiny model, and the pinned CLIs (tests/support/agent_clis.py)
run one print-mode / ``codex exec`` turn against it.

The tiny model's context window is 1024 tokens, one per character; the CLIs' default
system prompts and tools are far longer (an over-long prompt gets the dialect's own 400).
So each CLI runs as a small-model deployment would: a one-line system prompt (Claude
Code's ``--bare --system-prompt``, Codex's ``model_instructions_file``) and no tools (the
smallest built-in tool schema of either CLI alone is larger than the window). The
untrained model answers gibberish; what is checked is that each CLI takes it as a
well-formed answer (exit 0, the answer printed) and that Reef recorded the exchange,
complete, under the scenario's head, as the engine's weights answered it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from reef.artifacts import ClaimCheck, open_store
from reef.core.dialogue.model import Text
from reef.core.dialogue.records import answer_of
from reef.core.events import InferenceRecorded
from reef.core.topics import INFERENCE
from reef.log.embedded import EmbeddedLog
from reef.settings import Settings
from reef.testing.servers import ReefProcess, start_reef
from reef.wiring import readable_store
from tests.support import agent_clis
from tests.support.api import unique_scenario

SYSTEM = "Answer briefly."
PROMPT = "say hi"
#: Codex with its instructions replaced and every tool and extra context turned off
CODEX_SMALL = (
    "-c include_environment_context=false",
    "-c include_permissions_instructions=false",
    '-c web_search="disabled"',
    "-c skills.include_instructions=false",
    "-c tools.experimental_request_user_input.enabled=false",
    *(
        f"--disable {feature}"
        for feature in (
            "shell_tool",
            "unified_exec",
            "view_image",
            "multi_agent",
            "goals",
            "image_generation",
            "skill_search",
            "apps",
            "plugins",
            "tool_suggest",
            "sleep_tool",
        )
    ),
)


@pytest.fixture(scope="module")
def own_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ReefProcess, str]]:
    """``reef serve`` with no upstream: Reef's engine on the tiny model behind it."""
    token = f"own-{secrets.token_hex(8)}"
    state = tmp_path_factory.mktemp("own-engine") / "state"
    process = start_reef([], env={"REEF_TOKEN": token}, state_dir=state, timeout=180)
    yield process, token
    process.stop()


def recorded(process: ReefProcess, scenario: str) -> list[InferenceRecorded]:
    settings = Settings.of(state_dir=process.state_dir)
    claims = ClaimCheck(open_store(settings), settings.artifacts.claim_check_bytes)

    async def read() -> list[InferenceRecorded]:
        log = EmbeddedLog(process.state_dir / "log.sqlite3")
        try:
            async with readable_store(log, claims) as store:
                return [
                    s.event
                    async for s in store.read(INFERENCE, scenario=scenario)
                    if isinstance(s.event, InferenceRecorded)
                ]
        finally:
            await log.close()

    return asyncio.run(read())


def head_of(process: ReefProcess, token: str, scenario: str) -> str:
    response = httpx.get(
        f"{process.base_url}/reef/scenarios/{scenario}/releases",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    response.raise_for_status()
    (current,) = [r for r in response.json()["releases"] if r["current"]]
    head: str = current["release_id"]
    return head


def answered_text(record: InferenceRecorded) -> str:
    assert record.response_json is not None
    (message,) = answer_of(json.loads(record.response_json), record.route)
    return "".join(part.text for part in message.parts if isinstance(part, Text))


def test_claude_code_and_codex_get_answers_from_the_tiny_engine(
    own_engine: tuple[ReefProcess, str], tmp_path: Path
) -> None:
    process, token = own_engine
    work = tmp_path / "work"
    work.mkdir()
    claude_scenario, codex_scenario = unique_scenario("claude-own"), unique_scenario("codex-own")
    claude = agent_clis.claude_code(
        PROMPT,
        base_url=process.base_url,
        token=token,
        scenario=claude_scenario,
        workdir=work,
        home=tmp_path / "claude-home",
    )
    claude = replace(
        claude, argv=[*claude.argv, "--bare", "--system-prompt", SYSTEM, "--tools", ""]
    )
    instructions = tmp_path / "instructions.md"
    instructions.write_text(SYSTEM)
    codex = agent_clis.codex(
        PROMPT,
        v1_url=f"{process.base_url}/v1",
        token=token,
        scenario=codex_scenario,
        workdir=work,
        home=tmp_path / "codex-home",
    )
    small = [f"-c model_instructions_file={json.dumps(str(instructions))}", *CODEX_SMALL]
    options = [word for option in small for word in option.split(" ", 1)]
    codex = replace(codex, argv=[*codex.argv[:-1], *options, codex.argv[-1]])

    for run, scenario, route in (
        (claude, claude_scenario, "/v1/messages"),
        (codex, codex_scenario, "/v1/responses"),
    ):
        result = run.run(timeout=120)
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
        (record,) = recorded(process, scenario)
        assert (record.route, record.status, record.stream) == (route, 200, True)
        assert record.complete and record.error is None
        assert record.release_id == head_of(process, token, scenario)
        assert record.weight_version == "default"  # the engine's own weights answered
        assert answered_text(record).strip() in result.stdout
