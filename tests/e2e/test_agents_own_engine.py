"""Claude Code and Codex served by Reef's own engine: ``reef serve`` with no upstream starts
``reef engine`` on the built-in tiny model, and the pinned CLIs (reef_dev/agent_clis.py)
run one print-mode / ``codex exec`` turn against it.

The tiny model's context window is 1024 tokens, one per character; the CLIs' default
system prompts and tools are far longer (an over-long prompt gets the dialect's own 400).
So each CLI runs as a small-model deployment would: a one-line system prompt (Claude
Code's ``--bare --system-prompt``, Codex's ``model_instructions_file``) and no tools (the
smallest built-in tool schema of either CLI alone is larger than the window). The
untrained model answers gibberish; what is checked is that each CLI takes it as a
well-formed answer (exit 0, the answer printed) and that Reef recorded the exchange,
complete, under the scenario's head, as the engine's weights answered it.

The CLIs run as ``docs/agents.md`` tells a user to run them, from the page's own blocks:
its exports for Claude Code and its print-mode line, its ``config.toml`` for Codex and
its ``codex exec`` line, in bash, with the substitutions a reader makes (the server's
address, the scenario's name, the instructions file's path). The test adds only what
isolates it from this machine: a home of its own, the pinned binaries on ``PATH``, and
in Codex's configuration its update check and analytics off.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
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
from reef_dev import agent_clis
from tests.support import doc_pages
from tests.support.api import unique_scenario

PAGE = "agents.md"
#: where the page's instructions file stands, and what the test writes there
INSTRUCTIONS_PATH = "/path/to/instructions.md"
SYSTEM = "Answer briefly."
PROMPT = "say hi"


def block(starting: str) -> str:
    return doc_pages.block(PAGE, starting)


def page_shell(script: str, home: Path, env: dict[str, str], cwd: Path) -> agent_clis.AgentRun:
    """``script`` in bash, with the pinned CLIs on ``PATH`` as ``claude`` and ``codex``."""
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, binary in (
        ("claude", agent_clis.claude_binary()),
        ("codex", agent_clis.codex_binary()),
    ):
        (bin_dir / name).symlink_to(binary)
    base = {**agent_clis.base_env(home), **agent_clis.QUIET_ENV, **env}
    base["PATH"] = f"{bin_dir}:{base['PATH']}"
    return agent_clis.AgentRun(["bash", "-euo", "pipefail", "-c", script], base, cwd)


def test_the_page_has_the_blocks_this_test_runs() -> None:
    languages = [language for language, _ in doc_pages.page_blocks(PAGE)]
    assert languages[:4] == ["bash", "toml", "bash", "bash"], languages
    assert block("export ANTHROPIC_BASE_URL").rstrip().endswith("\nclaude")
    assert block("claude -p ").count("\n") == 1
    assert INSTRUCTIONS_PATH in block("codex exec ")


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
    exports = block("export ANTHROPIC_BASE_URL").rstrip().removesuffix("claude")  # interactive
    claude_script = doc_pages.as_reader(
        exports + block("claude -p "), process.base_url, claude_scenario
    )
    claude = page_shell(claude_script, tmp_path / "claude-home", {"REEF_TOKEN": token}, work)

    codex_home = tmp_path / "codex-home"
    config = doc_pages.as_reader(block('model_provider = "reef"'), process.base_url, codex_scenario)
    (codex_home / ".codex").mkdir(parents=True)
    isolated = "check_for_update_on_startup = false\n" + config + "\n[analytics]\nenabled = false\n"
    (codex_home / ".codex" / "config.toml").write_text(isolated)
    instructions = tmp_path / "instructions.md"
    instructions.write_text(SYSTEM)
    codex_script = block("codex exec ").replace(INSTRUCTIONS_PATH, str(instructions))
    codex = page_shell(codex_script, codex_home, {"REEF_TOKEN": token}, work)

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
