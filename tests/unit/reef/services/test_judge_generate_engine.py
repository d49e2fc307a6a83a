"""The judge's two dialects against a real ``reef engine`` (the built-in tiny model), which
serves SGLang's native ``/generate`` at its root and OpenAI chat under ``/v1``: one
judge URL, either dialect, and the reply is the engine's own greedy answer to the
dialect's request (the untrained model's words: no valid vote, but real shapes)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from reef.services.judge_client import DIALECTS, JudgeClient, JudgeConfig
from tests.support.engine import EngineProcess, running_engine

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "system", "content": "Judge."}, {"role": "user", "content": "2+2=4?"}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    with running_engine(tmp_path_factory.mktemp("judge-engine-logs")) as process:
        yield process


@pytest.mark.parametrize("dialect", ["sglang", "openai"])
async def test_the_engine_answers_the_judge_in_either_dialect(
    engine: EngineProcess, dialect: str
) -> None:
    config = JudgeConfig(
        url=f"{engine.url}/v1",
        model="tiny",
        producer="test",
        dialect=dialect,  # type: ignore[arg-type]
        max_tokens=6,
        temperature=0.0,
        timeout_s=60.0,
    )
    client = JudgeClient(config)
    try:
        text = await client.ask(MESSAGES)
    finally:
        await client.aclose()
    shape = DIALECTS[dialect]
    async with httpx.AsyncClient(base_url=shape.base(config.url), timeout=60.0) as direct:
        answered = await direct.post(shape.path, json=shape.request(config, MESSAGES))
    assert answered.status_code == 200, answered.text
    assert text == shape.reply(answered)
    if dialect == "sglang":
        assert text == answered.json()["text"]
        assert answered.json()["meta_info"]["finish_reason"]["type"] in ("stop", "length")
