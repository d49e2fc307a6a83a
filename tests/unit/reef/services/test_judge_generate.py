"""The judge's ``sglang`` dialect: SGLang's native ``/generate``.

The request mapping (ChatML text, ``sampling_params``, read back through the engine's
own model of SGLang's request), the reply mapping and every failure reason
(``httpx.MockTransport`` upstreams), the setting, and the judge service on a real
embedded log asking the scripted judge stand-in's ``/generate`` over loopback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.core import topics
from reef.core.errors import ConfigError
from reef.core.events import TurnCompleted, TurnJudged
from reef.engine.protocol import GenerateReqInput
from reef.services.eventstore import EventStore
from reef.services.judge import Judge, judge_config
from reef.services.judge_client import (
    JudgeClient,
    JudgeConfig,
    JudgeError,
    generate_request,
    render_chatml,
)
from reef.settings import Settings, load_settings
from reef.testing.servers import UpstreamProcess, running_upstream
from tests.support.judging import judged_store, session

AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SCENARIO = "judged-generate"
MESSAGES = [{"role": "system", "content": "Judge."}, {"role": "user", "content": "A turn."}]


def config(**overrides: Any) -> JudgeConfig:
    values: dict[str, Any] = {
        "url": "http://judge.test:30000/v1",
        "model": "prm",
        "producer": "test",
        "dialect": "sglang",
        "max_tokens": 64,
        "temperature": 0.7,
        "timeout_s": 5.0,
    }
    return JudgeConfig(**{**values, **overrides})


def reply(
    status: int = 200, body: Any = None, *, seen: list[httpx.Request] | None = None
) -> Callable[[httpx.Request], httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(status, json=body)

    return answer


async def ask(handler: Callable[[httpx.Request], Any], **overrides: Any) -> str:
    client = JudgeClient(config(**overrides), transport=httpx.MockTransport(handler))
    try:
        return await client.ask(MESSAGES)
    finally:
        await client.aclose()


def generated(text: str, finish: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"id": "r1", "finish_reason": finish or {"type": "stop", "matched": None}}
    return {"text": text, "output_ids": [1, 2], "meta_info": meta}


# -- the request --------------------------------------------------------------------------


def test_messages_are_rendered_as_chatml_ending_at_the_assistant_turn() -> None:
    assert render_chatml(MESSAGES) == (
        "<|im_start|>system\nJudge.<|im_end|>\n"
        "<|im_start|>user\nA turn.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_the_body_is_what_sglangs_generate_takes() -> None:
    body = generate_request(config(), MESSAGES)
    parsed = GenerateReqInput.model_validate(body)  # the engine's model of SGLang's request
    assert parsed.text == render_chatml(MESSAGES) and parsed.input_ids is None
    sampling = parsed.sampling_params
    assert (sampling.temperature, sampling.max_new_tokens) == (0.7, 64)
    assert sampling.stop == ["<|im_end|>"]
    assert set(body) == {"text", "sampling_params"}  # no model: the server serves one
    assert not parsed.stream


@pytest.mark.parametrize(
    ("url", "posted"),
    [
        ("http://judge.test:30000/v1", "http://judge.test:30000/generate"),
        ("http://judge.test:30000/v1/", "http://judge.test:30000/generate"),
        ("http://judge.test:30000", "http://judge.test:30000/generate"),
        ("http://judge.test/prm/", "http://judge.test/prm/generate"),
    ],
)
async def test_generate_is_posted_at_the_server_root(url: str, posted: str) -> None:
    seen: list[httpx.Request] = []
    assert await ask(reply(body=generated("ok \\boxed{1}"), seen=seen), url=url) == "ok \\boxed{1}"
    (request,) = seen
    assert (request.method, str(request.url)) == ("POST", posted)
    assert json.loads(request.content)["text"].endswith("<|im_start|>assistant\n")


async def test_the_key_goes_as_a_bearer_token() -> None:
    seen: list[httpx.Request] = []
    await ask(reply(body=generated("\\boxed{0}"), seen=seen), api_key="sk-judge")
    assert seen[0].headers["authorization"] == "Bearer sk-judge"


# -- the reply and its failures ------------------------------------------------------------


async def test_a_truncated_reply_is_still_a_reply() -> None:
    body = generated("I think \\boxed{", {"type": "length", "length": 64})
    assert await ask(reply(body=body)) == "I think \\boxed{"


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (200, {"choices": [{"message": {"content": "x"}}]}, "not a /generate reply: "),
        (200, [generated("a"), generated("b")], "not a /generate reply: "),
        (200, {"text": 3, "meta_info": {}}, "not a /generate reply: "),
        (200, {"text": "x", "meta_info": None}, "not a /generate reply: "),
        (
            200,
            generated("", {"type": "abort", "message": "server is overloaded"}),
            "generation aborted: server is overloaded",
        ),
        (400, {"error": {"message": "bad sampling params"}}, "HTTP 400: "),
        (500, {"error": {"message": "boom"}}, "HTTP 500: "),
    ],
)
async def test_a_reply_not_in_the_generate_shape_fails_with_its_reason(
    status: int, body: Any, reason: str
) -> None:
    with pytest.raises(JudgeError) as caught:
        await ask(reply(status, body))
    assert str(caught.value).startswith(reason), str(caught.value)


async def test_a_judge_that_does_not_answer_in_time_fails_the_vote() -> None:
    async def hang(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(200, json=generated("late"))

    with pytest.raises(JudgeError, match=r"^timed out after 0.2 s$"):
        await ask(hang, timeout_s=0.2)


async def test_a_refused_connection_fails_the_vote() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(JudgeError, match=r"^ConnectError: connection refused$"):
        await ask(refuse)


# -- the setting --------------------------------------------------------------------------


def test_the_dialect_is_read_once_from_the_environment() -> None:
    environ = {"REEF_JUDGE_URL": "http://prm:30000", "REEF_JUDGE_DIALECT": "sglang"}
    settings = load_settings(environ=environ).settings
    found = judge_config(settings.judge, settings.upstream, "p")
    assert found is not None and found.dialect == "sglang"
    default = _config(load_settings(environ={"REEF_JUDGE_URL": "http://j/v1"}).settings, "p")
    assert default is not None and default.dialect == "openai"


def test_an_unknown_dialect_is_a_clear_configuration_error() -> None:
    with pytest.raises(ConfigError, match=r"judge_dialect: Input should be 'openai' or 'sglang'"):
        load_settings(environ={"REEF_JUDGE_DIALECT": "vllm"})
    with pytest.raises(ConfigError, match=r"judge dialect 'vllm': expected one of openai, sglang"):
        JudgeClient(config(dialect="vllm"))


# -- the judge service against the stand-in's /generate ------------------------------------


@pytest.fixture(scope="module")
def judge_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    logs = tmp_path_factory.mktemp("judge-generate")
    with running_upstream(logs, "reef.testing.judge_upstream") as process:
        yield process


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    async with judged_store(tmp_path) as opened:
        yield opened


async def judge_all(store: EventStore, worker: Judge, next_texts: list[str]) -> dict[str, Any]:
    """Record one turn per next state, run the judge until it read them all: the
    judgements by turn id, and the turns."""
    turns: list[TurnCompleted] = []
    for n, text in enumerate(next_texts):
        exchanges, turn = session(SCENARIO, n, text, AT)
        await store.append_all(exchanges)
        turns.append(turn)
    await store.append_all(turns)
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(20):
            while worker.counts["turns_read"] < len(turns):
                assert not task.done(), task.exception()
                await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    found = [s.event async for s in store.read(topics.JUDGEMENTS)]
    by_turn = {j.turn_id: j for j in found if isinstance(j, TurnJudged)}
    return {t.event_id: by_turn[t.event_id] for t in turns}


def sglang_judge(store: EventStore, judge_model: UpstreamProcess, **env: str) -> Judge:
    environ = {
        "REEF_JUDGE_URL": judge_model.v1_url,  # the OpenAI base: /generate is at the root
        "REEF_JUDGE_DIALECT": "sglang",
        **{f"REEF_JUDGE_{k.upper()}": v for k, v in env.items()},
    }
    cfg = _config(load_settings(environ=environ).settings, "test")
    assert cfg is not None
    return Judge(store, JudgeClient(cfg), cfg)


async def test_the_judge_decides_through_generate_as_through_chat(
    store: EventStore, judge_model: UpstreamProcess
) -> None:
    worker = sglang_judge(store, judge_model, hints="true")
    texts = ["thanks, that works", "no, it is 4", "hmm", "__judge_fails__ no,"]
    try:
        found = await judge_all(store, worker, texts)
    finally:
        await worker.client.aclose()
    thanks, wrong, ambiguous, failing = found.values()
    assert [j.score for j in found.values()] == [1, -1, 0, 0]
    assert thanks.votes == [1, 1, 1] and not thanks.failed
    assert wrong.hints == ["The user said: no, it is 4"] and ambiguous.votes == [0, 0, 0]
    assert failing.failed and failing.invalid_votes == 3
    assert failing.failed_reason is not None
    assert failing.failed_reason.startswith('no vote: HTTP 500: {"error"')
    asked = judge_model.requests(contains="it is 4")
    assert len(asked) == 6 and {r["path"] for r in asked} == {"/generate"}
    assert all(r["body"]["text"].startswith("<|im_start|>system\n") for r in asked)


async def test_a_held_generate_request_times_out_as_an_invalid_vote(
    store: EventStore, judge_model: UpstreamProcess
) -> None:
    worker = sglang_judge(store, judge_model, timeout_s="3")
    try:  # the stand-in holds the first request that shows this next state
        (held,) = (await judge_all(store, worker, ["__judge_hangs__ thanks"])).values()
    finally:
        await worker.client.aclose()
    assert (held.score, held.votes, held.invalid_votes, held.failed) == (1, [1, 1], 1, False)


def _config(settings: Settings, producer: str) -> JudgeConfig | None:
    return judge_config(settings.judge, settings.upstream, producer)
