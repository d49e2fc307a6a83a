"""The real coding agents, Claude Code and Codex, through ``reef serve`` on both logs.

Each CLI (pinned, installed by scripts/bootstrap: reef_dev/agent_clis.py) is asked
to write a file. The scripted provider answers with a call of the CLI's own tool (Claude
Code's ``Write``, Codex's ``exec_command``); the CLI runs it for real in its working
directory and sends the result back; the provider then answers text. Reef must have
recorded both exchanges byte for byte as the provider received them, the sessions
processor must have bound the tool turn to the request carrying its result, and a report
quoting the receipts must join into a sample whose trajectory holds the call and the
result verbatim.

One deployment per log is shared by the module's tests; on Kafka it has its own topic
prefix and a ``reef streams`` worker hosting the join and sessions processors.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import shlex
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.artifacts import ClaimCheck, open_store
from reef.core.events import Event, InferenceRecorded, SampleJoined, TurnCompleted
from reef.core.topics import INFERENCE, SAMPLES, TURNS
from reef.log.base import EventLog
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import delete_prefixed_topics
from reef.settings import Settings
from reef.testing.servers import ReefProcess, UpstreamProcess, run_reef, start_reef
from reef.wiring import readable_store
from reef_dev import agent_clis
from reef_dev.chat_templates import chatml_tokenizer
from tests.support import doc_pages
from tests.support.api import unique_scenario
from tests.support.streams import start_streams

SESSIONS_ENV = {"REEF_TRACK_SESSIONS": "true", "REEF_FINGERPRINT_SECRET": "e2e-agent-secret"}
ANSWER = "wrote hello.txt"

#: ``docs/agents.md``'s command for what a sample trains on
AS_TRAINED = shlex.split(doc_pages.block("agents.md", "reef samples show "))


@dataclass
class AgentDeployment:
    """One ``reef serve`` the agents talk to, and a reader on its log."""

    process: ReefProcess
    token: str
    new_log: Callable[[], EventLog]
    #: how a ``reef`` command reaches this deployment's log
    log_args: tuple[str, ...] = ()

    def events(self, topic: str, scenario: str) -> list[Event]:
        """The scenario's events on ``topic``, bodies opened (and assembled from the
        blocks they share, kept in the server's artifact store)."""
        settings = Settings.of(state_dir=self.process.state_dir)
        claims = ClaimCheck(open_store(settings), settings.artifacts.claim_check_bytes)

        async def read() -> list[Event]:
            log = self.new_log()
            try:
                async with readable_store(log, claims) as store:
                    found = []
                    async for stored in store.read(topic, scenario=scenario):
                        assert stored.event is not None, f"undecodable: {stored.error}"
                        found.append(stored.event)
                    return found
            finally:
                await log.close()

        events: list[Event] = asyncio.run(read())
        return events

    def wait_for(self, topic: str, scenario: str, kind: type[Event], count: int) -> list[Any]:
        deadline = time.monotonic() + 30
        while True:
            found = [e for e in self.events(topic, scenario) if isinstance(e, kind)]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            assert self.process.managed.running(), self.process.output()
            time.sleep(0.2)


@pytest.fixture(scope="module", params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def deployment(
    request: pytest.FixtureRequest,
    upstream: UpstreamProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AgentDeployment]:
    token = f"agent-{secrets.token_hex(8)}"
    env = {**SESSIONS_ENV, "REEF_TOKEN": token, "REEF_UPSTREAM_API_KEY": "sk-up-agents"}
    state = tmp_path_factory.mktemp(f"agents-{request.param}") / "state"
    serve = ["--upstream-url", upstream.v1_url]
    if request.param == "embedded":
        process = start_reef(serve, env=env, state_dir=state)
        yield AgentDeployment(
            process, token, lambda: EmbeddedLog(state / "log.sqlite3"), ("--state-dir", str(state))
        )
        process.stop()
        return
    from reef.log.kafka import KafkaLog

    bootstrap: str = request.getfixturevalue("kafka_bootstrap")
    prefix = f"t-agents-{uuid.uuid4().hex[:10]}-"
    kafka = ["--log", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-topic-prefix", prefix]
    created = run_reef("topics", "create", *kafka, env=env)
    assert created.returncode == 0, f"reef topics create:\n{created.stdout}\n{created.stderr}"
    worker = start_streams(bootstrap, prefix, state.parent / "streams", SESSIONS_ENV)
    try:
        process = start_reef([*kafka, *serve], env=env, state_dir=state)
        try:
            worker.wait_ready()
            yield AgentDeployment(
                process,
                token,
                lambda: KafkaLog(bootstrap, topic_prefix=prefix, client_id="reef-e2e-agents"),
                (*kafka, "--state-dir", str(state)),
            )
        finally:
            process.stop()
    finally:
        worker.managed.stop(timeout=20)
        asyncio.run(delete_prefixed_topics(bootstrap, prefix))


# ---------------------------------------------------------------------------
# What every agent session must leave behind


def body(raw: str | None) -> dict[str, Any]:
    assert raw is not None
    parsed: dict[str, Any] = json.loads(raw)
    return parsed


def provider_bodies(upstream: UpstreamProcess, marker: str) -> list[dict[str, Any]]:
    """The model requests that reached the provider for this session (offering tools)."""
    found = upstream.requests(contains=marker)
    return [r["body"] for r in found if isinstance(r["body"], dict) and r["body"].get("tools")]


def recorded_session(
    dep: AgentDeployment, upstream: UpstreamProcess, scenario: str, marker: str
) -> list[InferenceRecorded]:
    """The session's two exchanges, recorded as the provider received them."""
    records = dep.wait_for(INFERENCE, scenario, InferenceRecorded, 2)
    sent = provider_bodies(upstream, marker)
    assert len(records) == len(sent) == 2, (records, sent)
    assert [body(r.request_json) for r in records] == sent
    return records


def assert_turn_bound(dep: AgentDeployment, scenario: str, first: str, second: str) -> None:
    (turn,) = dep.wait_for(TURNS, scenario, TurnCompleted, 1)
    assert (turn.receipt_id, turn.next_receipt_id) == (first, second)
    assert (turn.turn_index, turn.next_state_role) == (0, "tool")


def joined_trajectory(
    dep: AgentDeployment, scenario: str, receipts: list[str]
) -> tuple[str, list[Any]]:
    """Report on the receipts; the joined sample's id and trajectory (bodies opened)."""
    headers = {"Authorization": f"Bearer {dep.token}", "x-reef-scenario": scenario}
    report = {"score": 1.0, "feedback": {"note": "file written"}, "references": receipts}
    response = httpx.post(
        f"{dep.process.base_url}/reef/report", json=report, headers=headers, timeout=30
    )
    assert response.status_code == 200, response.text
    (sample,) = dep.wait_for(SAMPLES, scenario, SampleJoined, 1)
    assert sample.references == receipts
    trajectory: list[Any] = json.loads(sample.trajectory_json)
    assert [step["receipt"] for step in trajectory] == receipts
    return sample.event_id, trajectory


@pytest.fixture(scope="module")
def tool_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer folder whose chat template renders tools and calls as Qwen2.5 does."""
    folder = tmp_path_factory.mktemp("qwen-tool-tokenizer")
    chatml_tokenizer(["hello from wrote file_path content cmd"] * 4).save_pretrained(folder)
    return folder


def assert_trained_on_the_call(
    dep: AgentDeployment, sample_id: str, folder: Path, call: str, result: str, tmp: Path
) -> None:
    """``reef samples show --as-trained``, as sft with a tool-template tokenizer renders
    it: the call inside a trained span, the tool's result outside every one."""
    config = tmp / "sft.yaml"
    config.write_text("reef:\n  recipe: sft\nrecipe:\n  training:\n    max_length: 1000000\n")
    page_line = [sample_id if word == "SAMPLE_ID" else word for word in AS_TRAINED]
    assert page_line[:2] == ["reef", "samples"], page_line
    shown = run_reef(  # docs/agents.md's line, with this deployment's model, recipe and log
        *page_line[1:],
        "--model",
        str(folder),
        "--config",
        str(config),
        *dep.log_args,
    )
    assert shown.returncode == 0, f"{shown.stdout}\n{shown.stderr}"
    spans = re.findall(r"\[train\](.*?)\[/train\]", shown.stdout, flags=re.S)
    assert any(call in span for span in spans), shown.stdout[-3000:]
    assert any(ANSWER in span for span in spans)
    assert result in shown.stdout and not any(result in span for span in spans)


def run_agent(run: agent_clis.AgentRun) -> str:
    result = run.run(timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def as_json(value: Any) -> Any:
    """A trajectory step's body (text or already parsed)."""
    return json.loads(value) if isinstance(value, str) else value


def sse_payloads(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON events of a streamed exchange's recorded SSE bytes."""
    lines = record["sse"].splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def streamed_tool_use(record: dict[str, Any]) -> dict[str, Any]:
    """The Anthropic ``tool_use`` block a recorded stream carried, assembled from its
    ``content_block_start`` and ``input_json_delta`` events."""
    events = sse_payloads(record)
    (start,) = [e for e in events if e["type"] == "content_block_start"]
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    arguments = "".join(d["partial_json"] for d in deltas if d["type"] == "input_json_delta")
    block: dict[str, Any] = {**start["content_block"], "input": json.loads(arguments)}
    assert block["type"] == "tool_use"
    assert [e["delta"]["stop_reason"] for e in events if e["type"] == "message_delta"] == [
        "tool_use"
    ]
    return block


# ---------------------------------------------------------------------------
# The agents


def test_claude_code_writes_a_file_through_reef(
    deployment: AgentDeployment, upstream: UpstreamProcess, tool_tokenizer: Path, tmp_path: Path
) -> None:
    scenario, marker = unique_scenario("claude-code"), uuid.uuid4().hex
    work, target = tmp_path / "work", tmp_path / "work" / "hello.txt"
    work.mkdir()
    content = f"hello from claude code {marker}\n"
    arguments = {"file_path": str(target), "content": content}
    prompt = f"Call tool Write with {json.dumps(arguments)} Return exactly: {ANSWER}"
    run = agent_clis.claude_code(
        prompt,
        base_url=deployment.process.base_url,
        token=deployment.token,
        scenario=scenario,
        workdir=work,
        home=tmp_path / "home",
    )
    assert ANSWER in run_agent(run)
    assert target.read_text() == content

    first, second = recorded_session(deployment, upstream, scenario, marker)
    call = streamed_tool_use(body(first.response_json))
    assert (call["name"], call["input"]) == ("Write", arguments)
    said_again, result_message = body(second.request_json)["messages"][-2:]
    assert said_again == {"role": "assistant", "content": [call]}
    (result,) = result_message["content"]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", call["id"])
    assert str(target) in json.dumps(result["content"])
    assert body(second.response_json)["message"]["content"] == ANSWER
    assert_turn_bound(deployment, scenario, first.event_id, second.event_id)

    sample_id, (said, answered) = joined_trajectory(
        deployment, scenario, [first.event_id, second.event_id]
    )
    assert streamed_tool_use(as_json(said["response"])) == call
    assert as_json(answered["request"])["messages"][-2:] == [said_again, result_message]
    assert as_json(answered["request"]) == body(second.request_json)
    written = json.dumps({"name": "Write", "arguments": arguments})[:-1]
    assert_trained_on_the_call(
        deployment, sample_id, tool_tokenizer, written, "File created successfully", tmp_path
    )


def test_codex_writes_a_file_through_reef(
    deployment: AgentDeployment, upstream: UpstreamProcess, tool_tokenizer: Path, tmp_path: Path
) -> None:
    scenario, marker = unique_scenario("codex"), uuid.uuid4().hex
    work = tmp_path / "work"
    work.mkdir()
    arguments = {"cmd": f"printf '%s\\n' 'hello from codex {marker}' > hello.txt"}
    prompt = f"Call tool exec_command with {json.dumps(arguments)} Return exactly: {ANSWER}"
    run = agent_clis.codex(
        prompt,
        v1_url=f"{deployment.process.base_url}/v1",
        token=deployment.token,
        scenario=scenario,
        workdir=work,
        home=tmp_path / "home",
    )
    assert ANSWER in run_agent(run)
    assert (work / "hello.txt").read_text() == f"hello from codex {marker}\n"

    first, second = recorded_session(deployment, upstream, scenario, marker)
    (call,) = body(first.response_json)["response"]["output"]
    assert (call["type"], call["name"]) == ("function_call", "exec_command")
    assert json.loads(call["arguments"]) == arguments
    said_again, result = body(second.request_json)["input"][-2:]
    assert said_again["call_id"] == result["call_id"] == call["call_id"]
    assert (said_again["name"], said_again["arguments"]) == (call["name"], call["arguments"])
    assert result["type"] == "function_call_output" and "exited with code 0" in result["output"]
    (answer,) = body(second.response_json)["response"]["output"]
    assert answer["content"][0]["text"] == ANSWER
    assert_turn_bound(deployment, scenario, first.event_id, second.event_id)

    sample_id, (said, answered) = joined_trajectory(
        deployment, scenario, [first.event_id, second.event_id]
    )
    assert as_json(said["response"])["response"]["output"] == [call]
    assert as_json(answered["request"])["input"][-2:] == [said_again, result]
    assert as_json(answered["request"]) == body(second.request_json)
    executed = json.dumps({"name": "exec_command", "arguments": arguments})[:-1]
    assert_trained_on_the_call(
        deployment, sample_id, tool_tokenizer, executed, "exited with code 0", tmp_path
    )


def test_erasing_a_claude_code_turn_erases_its_prompt_from_the_whole_session(
    deployment: AgentDeployment, tmp_path: Path
) -> None:
    """The CLI resends the user's prompt in every request of the session; erasing the
    first exchange must make that prompt unreadable in the later one too."""
    scenario, card = unique_scenario("claude-erase"), "4111 1111 1111 1111"
    work = tmp_path / "work"
    work.mkdir()
    arguments = {"file_path": str(work / "card.txt"), "content": "noted\n"}
    prompt = (
        f"My card is {card}. Call tool Write with {json.dumps(arguments)} Return exactly: {ANSWER}"
    )
    run = agent_clis.claude_code(
        prompt,
        base_url=deployment.process.base_url,
        token=deployment.token,
        scenario=scenario,
        workdir=work,
        home=tmp_path / "home",
    )
    assert ANSWER in run_agent(run)
    first, second = deployment.wait_for(INFERENCE, scenario, InferenceRecorded, 2)
    assert card in (second.request_json or "")
    headers = {"Authorization": f"Bearer {deployment.token}"}
    url = f"{deployment.process.base_url}/reef/scenarios/{scenario}/records"
    erased = httpx.delete(f"{url}/{first.event_id}", headers=headers, timeout=30)
    assert erased.status_code == 200, erased.text
    deadline = time.monotonic() + 30
    while True:
        records = [
            e for e in deployment.events(INFERENCE, scenario) if isinstance(e, InferenceRecorded)
        ]
        readable = " ".join(f"{r.request_json} {r.response_json}" for r in records)
        if card not in readable or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(records) == 2 and card not in readable
    later = httpx.get(f"{url}/{second.event_id}", headers=headers, timeout=30)
    assert later.status_code == 200 and card not in later.text
    assert later.json().get("partly_erased") is True
