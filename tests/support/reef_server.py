"""``reef serve`` as a real process on loopback, on either event log, for end-to-end tests.

:func:`launch` starts a :class:`ReefServer` (the process, its token and upstream key, and
a reader on its log); the ``_servers_stay_up`` fixture fails a test during which a
launched server died, and ``upstream`` is the session's scripted provider stand-in.
Conftest modules re-export both fixtures for pytest to find.

The Kafka topics are shared by every test and every run, so a :class:`ReefServer` reads
the log only from the end offsets it saw before it started.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.core.events import Event, InferenceRecorded
from reef.core.topics import ALL_TOPICS, INFERENCE, REPORTS, SCENARIOS
from reef.log.base import EventLog
from reef.testing.servers import (
    ReefProcess,
    UpstreamProcess,
    running_upstream,
    start_reef,
)
from reef.wiring import readable_store

API_TOPICS = (SCENARIOS, INFERENCE, REPORTS)

LOG_KINDS = [
    pytest.param("embedded", id="embedded"),
    pytest.param("kafka", id="kafka", marks=pytest.mark.kafka),
]

Offsets = dict[str, dict[int, int]]


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


class RecordedEvents:
    """What a test reads of a deployment's log, given :meth:`events` (a server's or an
    in-process app's): its exchanges, and waiting for an event to arrive."""

    #: how often :meth:`wait_for` reads the log again
    POLL_S = 0.2

    def events(self, topic: str, scenario: str | None = None) -> list[Event]:
        raise NotImplementedError

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
            time.sleep(self.POLL_S)


@dataclass
class ReefServer(RecordedEvents):
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
                async with readable_store(log, self.process.claims()) as store:  # bodies opened
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


def running_servers_output() -> list[str]:
    """The output of every launched server still running (shown with a failed test)."""
    return [server.output() for server in _LAUNCHED if not server.stopped and not server.died()]


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


@pytest.fixture(scope="session", name="upstream")
def upstream_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    with running_upstream(tmp_path_factory.mktemp("upstream")) as process:
        yield process


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
