"""The quickstart run as written: httpx, the OpenAI SDK and curl.

Only the address differs from the seed (a free loopback port instead of 8900); the token
is the seed's own ``reef-local``, the scenario its ``hello-reef``.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import httpx
import openai
import pytest

from tests.support.api import RECEIPT
from tests.support.reef_server import ReefServer


@pytest.fixture(scope="module")
def reef_options() -> dict[str, Any]:
    return {"token": "reef-local"}


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["curl", *args], capture_output=True, text=True, timeout=60, check=False)


def header_value(raw_headers: str, name: str) -> str | None:
    for line in raw_headers.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def test_healthz_with_curl(reef_server: ReefServer) -> None:
    result = curl("-f", f"{reef_server.base_url}/healthz")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"ok": True}


def test_httpx_flow_verbatim(reef_server: ReefServer) -> None:
    reef = httpx.Client(
        base_url=reef_server.base_url,
        headers={"Authorization": "Bearer reef-local", "x-reef-scenario": "hello-reef"},
    )
    with reef:
        response = reef.post(
            "/v1/chat/completions",
            json={
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": "Return exactly: reef is ready"}],
            },
        )
        response.raise_for_status()
        receipt = response.headers["x-reef-agent-record-id"]
        content = response.json()["choices"][0]["message"]["content"]
        matched = content.strip() == "reef is ready"

        report = reef.post(
            "/reef/report",
            json={
                "score": float(matched),
                "feedback": "matched" if matched else "wrong answer",
                "references": [receipt],
            },
        )
    assert RECEIPT.match(receipt), receipt
    assert matched, content
    assert report.status_code == 200, report.text
    answer = report.json()
    assert answer["scenario"] == "hello-reef"
    assert answer["request_type"] == "report"
    assert isinstance(answer["agent_record_id"], str) and answer["agent_record_id"]
    assert answer["agent_record_id"] != receipt
    recorded = [e for e in reef_server.inference("hello-reef") if e.event_id == receipt]
    assert len(recorded) == 1, f"receipt {receipt} not in the log"


def test_openai_sdk_flow(reef_server: ReefServer) -> None:
    client = openai.OpenAI(
        base_url=f"{reef_server.base_url}/v1",
        api_key="reef-local",
        default_headers={"x-reef-scenario": "hello-reef"},
        max_retries=0,
    )
    with client:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "Return exactly: reef is ready"}],
        )
    receipt = raw.headers["x-reef-agent-record-id"]
    completion = raw.parse()
    assert RECEIPT.match(receipt), receipt
    assert completion.choices[0].message.content == "reef is ready"
    assert raw.headers.get("x-reef-release-id"), dict(raw.headers)


def test_curl_receipt_in_header(reef_server: ReefServer) -> None:
    result = curl(
        "-sS",
        "-D",
        "-",
        "-o",
        "/dev/null",
        f"{reef_server.base_url}/v1/chat/completions",
        "-H",
        "Authorization: Bearer reef-local",
        "-H",
        "x-reef-scenario: hello-reef",
        "-H",
        "Content-Type: application/json",
        "-d",
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}',
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("HTTP/1.1 200"), result.stdout
    receipt = header_value(result.stdout, "x-reef-agent-record-id")
    assert receipt is not None and RECEIPT.match(receipt), result.stdout


def test_curl_release_chain(reef_server: ReefServer) -> None:
    with reef_server.client("hello-reef") as reef:  # make sure the scenario exists
        reef.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        ).raise_for_status()
    result = curl(
        "-sS",
        "-H",
        "Authorization: Bearer reef-local",
        f"{reef_server.base_url}/reef/scenarios/hello-reef/releases",
    )
    assert result.returncode == 0, result.stderr
    chain = json.loads(result.stdout)
    assert chain["scenario"] == "hello-reef"
    assert len(chain["releases"]) == 1, chain
    (release,) = chain["releases"]
    assert release["operation"] == "creation"
    assert release["current"] is True
    assert release["release_id"]


def test_curl_scenarios_list(reef_server: ReefServer) -> None:
    with reef_server.client("hello-reef") as reef:
        reef.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        ).raise_for_status()
    result = curl(
        "-sS", "-H", "Authorization: Bearer reef-local", f"{reef_server.base_url}/reef/scenarios"
    )
    assert result.returncode == 0, result.stderr
    names = [s["scenario"] for s in json.loads(result.stdout)["scenarios"]]
    assert "hello-reef" in names
