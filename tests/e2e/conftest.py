"""End-to-end fixtures: ``reef serve`` as a real process on loopback, on both event logs.

* ``upstream`` (session): the scripted provider stand-in (tests/support/scripted_upstream.py).
* ``log_kind`` (module, parametrized ``embedded`` / ``kafka``; the Kafka case is marked
  ``kafka`` and uses the ``kafka_bootstrap`` broker from tests/stack_plugin.py).
* ``reef_factory`` (module): starts servers on the module's log kind, stopped at module end.
* ``reef_server`` (module): ``reef_factory(**reef_options)``; a module overrides the
  ``reef_options`` fixture to configure its server.

The Kafka topics are shared by every test and every run, so a :class:`ReefServer` reads
the log only from the end offsets it saw before it started, and tests use unique
scenario names.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.core.events import Event, InferenceRecorded
from reef.core.topics import ALL_TOPICS, INFERENCE, REPORTS, SCENARIOS
from reef.log.base import EventLog
from reef.wiring import readable_store
from tests.support.servers import (
    ReefProcess,
    UpstreamProcess,
    run_reef,
    running_upstream,
    start_reef,
)

RECEIPT = re.compile(r"^[0-9a-f]{32}$")
API_TOPICS = (SCENARIOS, INFERENCE, REPORTS)

LOG_KINDS = [
    pytest.param("embedded", id="embedded"),
    pytest.param("kafka", id="kafka", marks=pytest.mark.kafka),
]

Offsets = dict[str, dict[int, int]]


def unique_scenario(prefix: str = "e2e") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def marker() -> str:
    """A unique word to put in a prompt, to find the exchange again upstream or in the log."""
    return f"m{uuid.uuid4().hex[:16]}"


# ---------------------------------------------------------------------------
# Error shapes (PROTOCOL.md "Common rules")


def assert_openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    error = body["error"]
    assert {"message", "type", "param", "code"} <= set(error), body
    assert isinstance(error["message"], str) and error["message"], body
    return body


def assert_anthropic_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert isinstance(body, dict) and body.get("type") == "error", body
    error = body.get("error")
    assert isinstance(error, dict), body
    assert isinstance(error.get("type"), str) and error["type"], body
    assert isinstance(error.get("message"), str) and error["message"], body
    return body


def assert_reef_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    error = body["error"]
    assert isinstance(error.get("code"), str), body
    assert re.fullmatch(r"[a-z][a-z0-9_]*", error["code"]), f"code not snake_case: {body}"
    assert isinstance(error.get("message"), str) and error["message"], body
    return body


def error_shape_for(path: str) -> Callable[[httpx.Response, int], dict[str, Any]]:
    if path.startswith("/v1/messages"):
        return assert_anthropic_error
    if path.startswith("/v1/"):
        return assert_openai_error
    return assert_reef_error


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}], **extra}


def messages_body(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


# ---------------------------------------------------------------------------
# A running server and its log


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def open_log(kind: str, state_dir: Path, kafka_bootstrap: str | None) -> EventLog:
    """A reader on the server's log (not started: reading needs no producer)."""
    if kind == "kafka":
        from reef.log.kafka import KafkaLog

        assert kafka_bootstrap is not None
        return KafkaLog(kafka_bootstrap, client_id="reef-e2e-reader")
    from reef.log.embedded import EmbeddedLog

    return EmbeddedLog(state_dir / "log.sqlite3")


def end_offsets(log: EventLog, topics: Sequence[str]) -> Offsets:
    async def read() -> Offsets:
        try:
            return {topic: await log.end_offsets(topic) for topic in topics}
        finally:
            await log.close()

    result: Offsets = _run(read())
    return result


@dataclass
class ReefServer:
    """One ``reef serve`` process plus what a test needs to talk to it and read its log."""

    kind: str
    process: ReefProcess
    token: str | None
    upstream_key: str
    upstream: UpstreamProcess | None
    dialect: str
    kafka_bootstrap: str | None = None
    start_offsets: Offsets = field(default_factory=dict)
    stopped: bool = False

    @property
    def base_url(self) -> str:
        return self.process.base_url

    @property
    def v1_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def state_dir(self) -> Path:
        return self.process.state_dir

    def headers(self, scenario: str | None = None, token: str | None = None) -> dict[str, str]:
        out: dict[str, str] = {}
        chosen = token if token is not None else self.token
        if chosen is not None:
            out["Authorization"] = f"Bearer {chosen}"
        if scenario is not None:
            out["x-reef-scenario"] = scenario
        return out

    def client(
        self, scenario: str | None = None, token: str | None = None, timeout: float = 30.0
    ) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers=self.headers(scenario, token), timeout=timeout
        )

    # -- the log -------------------------------------------------------------

    def open_log(self) -> EventLog:
        return open_log(self.kind, self.state_dir, self.kafka_bootstrap)

    def events(self, topic: str, scenario: str | None = None) -> list[Event]:
        """Decoded events of a topic written since this server started (undecodable: fail)."""

        async def read() -> list[Event]:
            log = self.open_log()
            try:
                async with readable_store(log) as store:  # sealed bodies opened
                    found = []
                    start = self.start_offsets.get(topic)
                    async for stored in store.read(topic, start=start, scenario=scenario):
                        assert stored.event is not None, f"undecodable record: {stored.error}"
                        found.append(stored.event)
                    return found
            finally:
                await log.close()

        result: list[Event] = _run(read())
        return result

    def inference(self, scenario: str) -> list[InferenceRecorded]:
        found = self.events(INFERENCE, scenario)
        assert all(isinstance(e, InferenceRecorded) for e in found), found
        return found  # type: ignore[return-value]

    def wait_for(
        self,
        topic: str,
        scenario: str,
        predicate: Callable[[Event], bool] = lambda _: True,
        timeout: float = 15.0,
    ) -> list[Event]:
        """Poll until some event of ``scenario`` on ``topic`` matches; return the matches."""
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.events(topic, scenario) if predicate(e)]
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    def end_offsets(self, topics: Sequence[str] = API_TOPICS) -> Offsets:
        """End offsets of the topics the API writes (processors' outputs follow on their own)."""
        return end_offsets(self.open_log(), topics)

    def raw_log_bytes(self) -> bytes:
        """Every byte of the log: the SQLite files, or every record of every topic."""
        if self.kind == "embedded":
            return b"".join(
                p.read_bytes() for p in sorted(self.state_dir.rglob("*")) if p.is_file()
            )

        async def read() -> bytes:
            log = self.open_log()
            chunks: list[bytes] = []
            try:
                for topic in ALL_TOPICS:
                    async for record in log.read(topic, start=self.start_offsets.get(topic)):
                        chunks += [record.key or b"", record.value]
                        chunks += [k.encode() + v for k, v in record.headers]
            finally:
                await log.close()
            return b"\n".join(chunks)

        data: bytes = _run(read())
        return data

    def assert_nothing_written(self, before: Offsets) -> None:
        """The log's end offsets are what they were (a short settle first)."""
        time.sleep(0.1)
        after = self.end_offsets(list(before))
        assert after == before, f"the log changed: before={before} after={after}"

    def output(self) -> str:
        return self.process.output()

    def stop(self) -> None:
        self.stopped = True
        self.process.stop()

    def died(self) -> bool:
        """Exited although nobody stopped it."""
        return not self.stopped and not self.process.managed.running()


_LAUNCHED: list[ReefServer] = []


def server_env(
    *,
    token: str | None,
    tokens: str | None,
    upstream_key: str,
    extra: Mapping[str, str] | None,
) -> dict[str, str]:
    env = {"REEF_UPSTREAM_API_KEY": upstream_key}
    if token is not None:
        env["REEF_TOKEN"] = token
    if tokens is not None:
        env["REEF_TOKENS"] = tokens
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------
# Fixtures


@pytest.fixture(autouse=True)
def _servers_stay_up() -> Iterator[None]:
    """Fail loudly, with its output, when a server died during a test."""
    yield
    dead = [server for server in _LAUNCHED if server.died()]
    for server in dead:
        server.stopped = True
    _LAUNCHED[:] = [server for server in _LAUNCHED if not server.stopped]
    if dead:
        pytest.fail("reef serve died during the test:\n" + "\n".join(s.output() for s in dead))


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    with running_upstream(tmp_path_factory.mktemp("upstream")) as process:
        yield process


@pytest.fixture(scope="session")
def kafka_topics(kafka_bootstrap: str) -> str:
    """The broker's bootstrap, once ``reef topics create`` made Reef's topics there."""
    result = run_reef("topics", "create", "--log", "kafka", "--kafka-bootstrap", kafka_bootstrap)
    assert result.returncode == 0, f"reef topics create failed:\n{result.stdout}\n{result.stderr}"
    return kafka_bootstrap


@pytest.fixture(scope="module", params=LOG_KINDS)
def log_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


ReefFactory = Callable[..., ReefServer]


def launch(
    kind: str,
    *,
    upstream: UpstreamProcess | None,
    state_dir: Path,
    dialect: str = "openai",
    token: str | None = "",
    tokens: str | None = None,
    upstream_url: str | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    kafka_bootstrap: str | None = None,
    timeout: float = 60.0,
) -> ReefServer:
    """Start ``reef serve`` on ``kind``'s log. ``token=""`` makes a random one, None none."""
    chosen_token = f"reef-tok-{secrets.token_hex(8)}" if token == "" else token
    upstream_key = f"sk-upstream-{secrets.token_hex(8)}"
    if upstream_url is None:
        assert upstream is not None, "no upstream given"
        upstream_url = upstream.v1_url
    argv = [
        "--log",
        kind,
        "--upstream-url",
        upstream_url,
        "--upstream-dialect",
        dialect,
        *(["--kafka-bootstrap", kafka_bootstrap] if kind == "kafka" and kafka_bootstrap else []),
        *args,
    ]
    bootstrap = kafka_bootstrap if kind == "kafka" else None
    # Kafka topics hold every run's events: read only what comes after this point.
    start_offsets = (
        end_offsets(open_log(kind, state_dir, bootstrap), ALL_TOPICS) if bootstrap else {}
    )
    process = start_reef(
        argv,
        env=server_env(token=chosen_token, tokens=tokens, upstream_key=upstream_key, extra=env),
        state_dir=state_dir,
        timeout=timeout,
    )
    server = ReefServer(
        kind=kind,
        process=process,
        token=chosen_token,
        upstream_key=upstream_key,
        upstream=upstream,
        dialect=dialect,
        kafka_bootstrap=bootstrap,
        start_offsets=start_offsets,
    )
    _LAUNCHED.append(server)
    return server


@pytest.fixture(scope="module")
def reef_factory(
    request: pytest.FixtureRequest,
    log_kind: str,
    upstream: UpstreamProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ReefFactory]:
    """Starts servers on the module's log kind (keywords of :func:`launch`)."""
    started: list[ReefServer] = []
    bootstrap = request.getfixturevalue("kafka_topics") if log_kind == "kafka" else None

    def start(**options: Any) -> ReefServer:
        options.setdefault("kafka_bootstrap", bootstrap)
        options.setdefault("state_dir", tmp_path_factory.mktemp(f"state-{log_kind}"))
        server = launch(log_kind, upstream=upstream, **options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def reef_options() -> dict[str, Any]:
    """Override in a module to configure its ``reef_server`` (``reef_factory`` keywords)."""
    return {}


@pytest.fixture(scope="module")
def reef_server(reef_factory: ReefFactory, reef_options: dict[str, Any]) -> ReefServer:
    return reef_factory(**reef_options)
