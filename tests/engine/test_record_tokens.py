"""With REEF_RECORD_TOKENS, exchanges with an engine are recorded token-exact (RL recipes)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from reef.artifacts import ClaimCheck, open_store
from reef.core.events import InferenceRecorded
from reef.core.topics import INFERENCE
from reef.log.embedded import EmbeddedLog
from reef.settings import Settings
from reef.testing.servers import running_reef
from reef.wiring import readable_store


async def recorded(state_dir: Path) -> list[InferenceRecorded]:
    log = EmbeddedLog(state_dir / "log.sqlite3")
    await log.start()
    try:
        settings = Settings.of(state_dir=state_dir)  # bodies opened, from the artifact store
        claims = ClaimCheck(open_store(settings), settings.artifacts.claim_check_bytes)
        async with readable_store(log, claims) as store:
            return [
                s.event
                async for s in store.read(INFERENCE)
                if isinstance(s.event, InferenceRecorded)
            ]
    finally:
        await log.close()


def test_token_ids_and_logprobs_are_recorded_with_the_weight_version(tmp_path: Path) -> None:
    env = {"REEF_TOKEN": "t", "REEF_RECORD_TOKENS": "true"}
    with running_reef([], env=env, state_dir=tmp_path / "state", timeout=180) as reef:
        response = httpx.post(
            f"{reef.base_url}/v1/chat/completions",
            headers={"Authorization": "Bearer t", "x-reef-scenario": "rl"},
            json={
                "model": "tiny",
                "max_tokens": 5,
                "temperature": 0,
                "messages": [{"role": "user", "content": "hi"}],
            },
            timeout=60,
        )
        assert response.status_code == 200, response.text
    (event,) = asyncio.run(recorded(tmp_path / "state"))
    assert json.loads(event.request_json or "{}")["logprobs"] is True
    body = json.loads(event.response_json or "{}")
    meta = body["meta_info"]
    assert len(meta["output_ids"]) == 5
    assert len(meta["output_token_logprobs"]) == 5
    assert all(lp[0] <= 0.0 for lp in meta["output_token_logprobs"])
    assert event.weight_version == body["weight_version"]
