"""With REEF_RECORD_TOP_LOGPROBS=K, recorded exchanges carry the top-K ids per token."""

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

TOP = 3


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


def chat(base_url: str, **extra: object) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        headers={"Authorization": "Bearer t", "x-reef-scenario": "rl"},
        json={
            "model": "tiny",
            "max_tokens": 4,
            "temperature": 0,
            "messages": [{"role": "user", "content": "hi"}],
            **extra,
        },
        timeout=60,
    )


def test_top_k_ids_and_logprobs_are_recorded_per_generated_token(tmp_path: Path) -> None:
    env = {"REEF_TOKEN": "t", "REEF_RECORD_TOP_LOGPROBS": str(TOP)}
    with running_reef([], env=env, state_dir=tmp_path / "state", timeout=180) as reef:
        asked = chat(reef.base_url)
        assert asked.status_code == 200, asked.text
        declined = chat(reef.base_url, logprobs=False)  # the client's choice stands
        assert declined.status_code == 200, declined.text
    first, second = asyncio.run(recorded(tmp_path / "state"))
    request = json.loads(first.request_json or "{}")
    assert request["logprobs"] is True and request["top_logprobs"] == TOP
    meta = json.loads(first.response_json or "{}")["meta_info"]
    top, chosen = meta["output_top_logprobs"], meta["output_token_logprobs"]
    assert len(top) == len(meta["output_ids"]) == 4
    for entries, (logprob, token, _) in zip(top, chosen, strict=True):
        assert len(entries) == TOP
        assert len({e[1] for e in entries}) == TOP  # distinct ids
        values = [e[0] for e in entries]
        assert values == sorted(values, reverse=True) and values[0] <= 0.0
        assert entries[0][1] == token and abs(entries[0][0] - logprob) < 1e-5  # greedy
    assert "meta_info" not in json.loads(second.response_json or "{}")
    assert "top_logprobs" not in json.loads(second.request_json or "{}")


def test_top_k_recording_is_off_by_default(tmp_path: Path) -> None:
    env = {"REEF_TOKEN": "t", "REEF_RECORD_TOKENS": "true"}
    with running_reef([], env=env, state_dir=tmp_path / "state", timeout=180) as reef:
        assert chat(reef.base_url).status_code == 200
    (event,) = asyncio.run(recorded(tmp_path / "state"))
    assert "top_logprobs" not in json.loads(event.request_json or "{}")
    assert "output_top_logprobs" not in json.loads(event.response_json or "{}")["meta_info"]
