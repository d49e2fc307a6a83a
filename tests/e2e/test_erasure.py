"""Erasure: after ``DELETE /reef/scenarios/{s}/records/{id}`` no byte of the record's
bodies can be recovered, on the embedded log and on Kafka.

Each deployment serves exchanges whose request and response carry unique markers (one
large enough to be claim-checked: ``REEF_CLAIM_CHECK_BYTES=1024``), reports on them so
the join makes samples (one sample spans two records), captures the data keys, erases
two records and then checks every place the content could be. It also tracks sessions
and judges turns with hints on (the scripted judge stand-in): an agent session whose
user corrects the first answer ("no, <reply>") gets a judgement with the hint "The user
said: <reply>", a report computed from it and a sample; erasing the record that holds
the reply (the next turn's) must shred the hint in all three, while the judged turn's
own record stays. The places checked:

* the log's raw bytes: every file of the embedded state dir (SQLite database and WAL,
  the artifact store with the claim-checked objects, logs) — or, on Kafka, every record
  of every topic of the deployment (the workers' changelogs included) read from the beginning,
  and the broker's segment files of the key topic once the cleaner ran;
* the erased data keys themselves (absent everywhere: nothing can decrypt the sealed
  copies that stay in the immutable log);
* the records API, ``reef export`` of every topic, ``reef replay`` (whose live and
  replayed digests still agree), ``reef audit trail``, the joined samples, the
  judgements and the reports.

The records that were not erased stay readable everywhere.

An agent resends its whole context every turn, and a request's blocks (system prompt,
tools, each message) are stored once per session, sealed under the key of the record
that introduced them. A Claude Code session of three turns (the captured requests under
``tests/fixtures/agents/claude_code`` as templates) whose first prompt holds a card
number: after erasing the first receipt the card number is in no record of the session
(the later ones read partly erased, ``{"erased": true}`` in place of what the first
introduced), not in the raw log or any file, the records API, the sample, ``reef
export``; erasing the session then erases the rest.
"""

from __future__ import annotations

import asyncio
import copy
import json
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.codec import ID_HEADER_LEN, MAGIC, EventCodec
from reef.core import topics
from reef.core.events import InferenceRecorded, ReportSubmitted, SampleJoined, TurnJudged
from reef.core.feedback import report_id as computed_report_id
from reef.crypto.rings import open_keyring
from reef.log.base import EventLog
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import delete_prefixed_topics
from reef.services.eventstore import StoredEvent
from reef.testing.servers import (
    ManagedProcess,
    ReefProcess,
    UpstreamProcess,
    clean_env,
    reef_executable,
    run_reef,
    running_upstream,
    spawn,
    start_reef,
)
from reef.wiring import readable_store
from reef_dev.stack import kafka as stack_kafka
from reef_dev.stack.paths import StackSettings
from tests.support.api import assert_reef_error, chat_body, unique_scenario
from tests.support.streams import start_streams
from tests.support.wire import confluent_codec, confluent_env

TIMEOUT = 60.0


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@dataclass
class Exchange:
    asked: str  # marker in the request only
    answered: str  # marker the upstream answers with (so it is in the response)
    receipt: str = ""
    large: bool = False

    @property
    def markers(self) -> list[bytes]:
        return [self.asked.encode(), self.answered.encode()]


@dataclass
class Deployment:
    name: str
    process: ReefProcess
    token: str
    scenario: str
    log_flags: list[str]
    new_log: Callable[[], EventLog]
    #: Kafka: the topic prefix and the broker's data dir (for the key topic's files)
    prefix: str = ""
    broker_dir: Path | None = None
    #: a ``wire_format: confluent`` deployment's codec (None: single-object)
    codec: EventCodec | None = None
    exchanges: dict[str, Exchange] = field(default_factory=dict)

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}", "x-reef-scenario": self.scenario}
        return httpx.Client(base_url=self.process.base_url, headers=headers, timeout=TIMEOUT)

    def cli(self, *args: str) -> str:
        result = run_reef(*args, *self.log_flags, timeout=180)
        assert result.returncode == 0, f"reef {args}:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def stored(self, topic: str) -> list[StoredEvent]:
        async def read() -> list[StoredEvent]:
            log = self.new_log()
            await log.start()
            try:
                async with readable_store(log, self.process.claims(), self.codec) as store:
                    return [s async for s in store.read(topic, scenario=self.scenario)]
            finally:
                await log.close()

        found: list[StoredEvent] = _run(read())
        return found

    def keys(self, receipts: list[str]) -> dict[str, bytes]:
        async def read() -> dict[str, bytes]:
            log = self.new_log()
            await log.start()
            ring = open_keyring(log)
            await ring.start()
            try:
                return await ring.get_many(receipts)
            finally:
                await ring.close()
                await log.close()

        found: dict[str, bytes] = _run(read())
        return found

    def assert_wire_format(self) -> None:
        """Every event record the deployment wrote has its wire format's header."""
        header = confluent_header_of if self.codec is not None else single_object_header_of

        async def read() -> list[tuple[str, bytes]]:
            log = self.new_log()
            await log.start()
            try:
                return [
                    (topic, record.value)
                    for topic in topics.ALL_TOPICS
                    async for record in log.read(topic)
                ]
            finally:
                await log.close()

        values = _run(read())
        assert values
        for topic, value in values:
            assert header(value), (topic, value[:12])

    def raw_topics(self) -> bytes:
        """Every record (key, value, headers) of every topic of this deployment."""

        async def read() -> bytes:
            log = self.new_log()
            await log.start()
            chunks: list[bytes] = []
            try:
                names = [*topics.LOG_TOPICS]
                if self.prefix:  # the workers' changelogs (and any other topic) of the prefix
                    names = await _prefixed_topics(log, self.prefix)
                for topic in names:
                    async for record in log.read(topic):
                        chunks += [record.key or b"", record.value]
                        chunks += [k.encode() + v for k, v in record.headers]
            finally:
                await log.close()
            return b"\n".join(chunks)

        data: bytes = _run(read())
        return data


async def _prefixed_topics(log: EventLog, prefix: str) -> list[str]:
    from aiokafka.admin import AIOKafkaAdminClient

    assert hasattr(log, "bootstrap")
    admin = AIOKafkaAdminClient(bootstrap_servers=log.bootstrap)
    await admin.start()
    try:
        return [t.removeprefix(prefix) for t in await admin.list_topics() if t.startswith(prefix)]
    finally:
        await admin.close()


def confluent_header_of(value: bytes) -> bool:
    return value[:1] == b"\x00" and len(value) > ID_HEADER_LEN


def single_object_header_of(value: bytes) -> bool:
    return value[:2] == MAGIC


def files_bytes(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


#: requests stored as blocks shared within a session (docs/storage.md)
ENV = {
    "REEF_CLAIM_CHECK_BYTES": "1024",
    "REEF_JOIN_PARK_TIMEOUT_S": "30",
    "REEF_BODY_FORMAT": "blocks",
}
#: sessions tracked and turns judged with hints (on Kafka: reef streams and reef judge)
JUDGE_ENV = {
    "REEF_TRACK_SESSIONS": "true",
    "REEF_FINGERPRINT_SECRET": "e2e-erasure-secret",
    "REEF_JUDGE_TURNS": "true",
    "REEF_JUDGE_HINTS": "true",
    "REEF_JUDGE_TIMEOUT_S": "30",
}
#: an untagged request is a session's turn only when it offers tools (else a side call)
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def judge_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    """The scripted judge; its logs (the prompts quote the conversation) are the judge
    provider's, outside the deployment's directories."""
    logs = tmp_path_factory.mktemp("erasure-judge")
    with running_upstream(logs, "reef.testing.judge_upstream") as judge:
        yield judge


@pytest.fixture(
    scope="module",
    params=["embedded", "embedded-confluent", pytest.param("kafka", marks=pytest.mark.kafka)],
)
def deployment(
    request: pytest.FixtureRequest,
    upstream: UpstreamProcess,
    judge_upstream: UpstreamProcess,
    tmp_path_factory: pytest.TempPathFactory,
    reef_stack_settings: StackSettings,
) -> Iterator[Deployment]:
    token = f"adm-{secrets.token_hex(8)}"
    work = tmp_path_factory.mktemp(f"erasure-{request.param}")
    env = {**ENV, **JUDGE_ENV, "REEF_TOKEN": token, "REEF_UPSTREAM_API_KEY": "sk-up-erasure"}
    env["REEF_JUDGE_URL"] = judge_upstream.v1_url
    scenario = unique_scenario("erase")
    if request.param.startswith("embedded"):
        state = work / "state"
        flags = ["--state-dir", str(state)]
        codec = None
        if request.param == "embedded-confluent":  # every value: 00 + registry id + body
            url = request.getfixturevalue("schema_registry_url")
            codec = confluent_codec(url)
            env.update(confluent_env(url))
            flags += ["--schema-registry-url", url]  # reef export, replay, audit read ids
        served = start_reef(["--upstream-url", upstream.v1_url], env=env, state_dir=state)
        try:
            yield Deployment(
                "embedded",
                served,
                token,
                scenario,
                flags,
                lambda: EmbeddedLog(state / "log.sqlite3"),
                codec=codec,
            )
        finally:
            served.stop()
        return
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    prefix = f"t-erasure-{uuid.uuid4().hex[:10]}-"
    kafka = ["--log", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-topic-prefix", prefix]
    state = work / "state"
    flags = [*kafka, "--state-dir", str(state)]  # local artifacts (claim-checked bodies)
    env["REEF_KEY_TOPIC_SEGMENT_MS"] = "1000"  # so the test sees the cleaner at work
    created = run_reef("topics", "create", *flags, env=env)
    assert created.returncode == 0, f"reef topics create:\n{created.stdout}\n{created.stderr}"
    # reef streams hosts the sessions and feedback processors beside the join
    hosted = {"REEF_TRACK_SESSIONS": "true", "REEF_JUDGE_TURNS": "true"}
    worker = start_streams(bootstrap, prefix, work / "streams", hosted)
    process: ReefProcess | None = None
    judge: ManagedProcess | None = None
    try:
        process = start_reef([*kafka, "--upstream-url", upstream.v1_url], env=env, state_dir=state)
        judge = spawn(
            [reef_executable(), "judge", *flags], env=clean_env(env), log_dir=work, name="judge"
        )
        worker.wait_ready()
        from reef.log.kafka import KafkaLog

        (node,) = stack_kafka.shape_for(reef_stack_settings, "single").nodes
        yield Deployment(
            "kafka",
            process,
            token,
            scenario,
            flags,
            lambda: KafkaLog(bootstrap, topic_prefix=prefix, client_id="reef-e2e-erasure"),
            prefix=prefix,
            broker_dir=node.data_dir,
        )
    finally:
        if process is not None:
            process.stop()
        if judge is not None:
            judge.stop()
        worker.managed.stop(timeout=20)
        _run(delete_prefixed_topics(bootstrap, prefix))


def serve(dep: Deployment, name: str, large: bool = False) -> Exchange:
    tag = uuid.uuid4().hex[:12]
    exchange = Exchange(f"asked-{name}-{tag}", f"answered-{name}-{tag}", large=large)
    text = f"question {exchange.asked}"
    if large:
        text += " " + f"filler {exchange.asked} " * 80
    text += f" Return exactly: {exchange.answered}"
    with dep.client() as client:
        response = client.post("/v1/chat/completions", json=chat_body(text))
    assert response.status_code == 200, response.text
    assert exchange.answered in response.text
    exchange.receipt = response.headers["x-reef-agent-record-id"]
    dep.exchanges[name] = exchange
    return exchange


def report(dep: Deployment, *names: str) -> str:
    refs = [dep.exchanges[n].receipt for n in names]
    with dep.client() as client:
        response = client.post("/reef/report", json={"score": 1.0, "references": refs})
    assert response.status_code == 200, response.text
    report_id: str = response.json()["agent_record_id"]
    return report_id


def fate(dep: Deployment, report_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT
    while True:
        with dep.client() as client:
            response = client.get(f"/reef/reports/{report_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if body["status"] != "pending":
            return body
        assert time.monotonic() < deadline, f"report {report_id} still pending: {body}"
        time.sleep(0.1)


def judged_session(dep: Deployment) -> tuple[Exchange, Exchange]:
    """An agent session of two turns whose user corrects the first answer ("no, ..."): the
    judge scores turn 1 -1 with the hint "The user said: <the reply>"; the reply (with its
    markers) is the second turn's request."""
    tag = uuid.uuid4().hex[:12]
    first = Exchange(f"asked-h1-{tag}", f"answered-h1-{tag}")
    reply = Exchange(f"replied-h2-{tag}", f"answered-h2-{tag}")
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"question {first.asked} Return exactly: {first.answered}"}
    ]
    with dep.client() as client:
        for exchange in (first, reply):
            body = {"model": "gpt-4o", "messages": messages, "tools": TOOLS}
            response = client.post("/v1/chat/completions", json=body)
            assert response.status_code == 200, response.text
            exchange.receipt = response.headers["x-reef-agent-record-id"]
            said = response.json()["choices"][0]["message"]
            text = f"no, {reply.asked} is what I meant. Return exactly: {reply.answered}"
            messages = [*messages, said, {"role": "user", "content": text}]
    dep.exchanges["h1"], dep.exchanges["h2"] = first, reply
    return first, reply


def judgement_of(dep: Deployment, receipt: str) -> StoredEvent:
    """The (opened) judgement of the turn ``receipt``, once the judge appended it."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        for stored in dep.stored(topics.JUDGEMENTS):
            if isinstance(stored.event, TurnJudged) and stored.event.receipt_id == receipt:
                return stored
        assert time.monotonic() < deadline, f"turn {receipt} not judged in {TIMEOUT:.0f}s"
        time.sleep(0.2)


def computed_report(dep: Deployment, report_id: str) -> StoredEvent:
    (found,) = [
        s
        for s in dep.stored(topics.REPORTS)
        if isinstance(s.event, ReportSubmitted) and s.event.event_id == report_id
    ]
    return found


def erase(dep: Deployment, receipt: str, scenario: str | None = None) -> httpx.Response:
    with dep.client() as client:
        return client.delete(f"/reef/scenarios/{scenario or dep.scenario}/records/{receipt}")


def wait_for_cleaned_key(dep: Deployment, receipt: str, key: bytes) -> None:
    """Kafka: erase again (each tombstone rolls the key topic's 1 s segment) until the
    cleaner dropped the key from the topic, then check the broker's files for it."""
    assert dep.broker_dir is not None and dep.broker_dir.is_dir(), dep.broker_dir
    deadline = time.monotonic() + 120.0
    while True:
        again = erase(dep, receipt)
        assert again.status_code == 200 and again.json()["already_erased"], again.text
        on_topic = key in dep.raw_topics()
        dirs = list(dep.broker_dir.glob(f"{dep.prefix}{topics.KEYS}-*"))
        assert dirs, f"no partition directories of the key topic in {dep.broker_dir}"
        in_files = any(key in files_bytes(d) for d in dirs)
        if not on_topic and not in_files:
            return
        assert time.monotonic() < deadline, (
            f"key of {receipt} still on the topic ({on_topic}) or in the broker's files "
            f"({in_files}) after 120 s"
        )
        time.sleep(2.0)


def test_erased_content_is_unrecoverable_everywhere(deployment: Deployment) -> None:
    dep = deployment
    erased_a = serve(dep, "a")
    kept_b = serve(dep, "b")
    erased_c = serve(dep, "c", large=True)  # claim-checked: its object is in the store
    kept_d = serve(dep, "d")
    two_records = report(dep, "a", "b")  # one sample, two records, one of them erased
    only_c = report(dep, "c")
    only_d = report(dep, "d")
    judged_h1, erased_h2 = judged_session(dep)  # erased: the record holding the user's reply
    judged = judgement_of(dep, judged_h1.receipt)
    assert isinstance(judged.event, TurnJudged) and judged.event.score == -1
    hinted = computed_report_id(dep.scenario, judged.event.turn_id)
    for report_id in (two_records, only_c, only_d, hinted):
        assert fate(dep, report_id)["status"] == "accepted"
    # while the keys exist the hint reads back: in the judgement and the computed report
    (hint,) = judged.event.hints
    assert hint.startswith("The user said: no, ") and erased_h2.asked in hint, hint
    hinted_report = computed_report(dep, hinted).event
    assert isinstance(hinted_report, ReportSubmitted)
    assert json.loads(hinted_report.feedback_json) == [hint]

    receipts = [e.receipt for e in (erased_a, kept_b, erased_c, kept_d, judged_h1, erased_h2)]
    keys = dep.keys(receipts)
    assert set(keys) == set(receipts), "every exchange has its data key"
    # the embedded log and the artifact store hold only sealed bodies, even now
    raw = dep.raw_topics()
    dep.assert_wire_format()
    for exchange in dep.exchanges.values():
        for marker in exchange.markers:
            assert marker not in raw, f"{marker!r} in the log in clear"
    (claimed,) = [
        s.event
        for s in dep.stored(topics.INFERENCE)
        if s.event is not None and s.event.event_id == erased_c.receipt
    ]

    # -- erase ---------------------------------------------------------------------------
    for exchange in (erased_a, erased_c, erased_h2):
        answer = erase(dep, exchange.receipt)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {
            "agent_record_id": exchange.receipt,
            "scenario": dep.scenario,
            "erased": True,
            "already_erased": False,
            "shadows_erased": [],
        }
    again = erase(dep, erased_a.receipt)
    assert again.status_code == 200 and again.json()["already_erased"] is True
    assert_reef_error(erase(dep, uuid.uuid4().hex), 404)
    assert_reef_error(erase(dep, two_records), 409)  # a report is not erasable
    assert_reef_error(erase(dep, erased_a.receipt, unique_scenario("other")), 404)

    # a report quoting an erased record is rejected as such
    late = report(dep, "c")
    rejected = fate(dep, late)
    assert rejected["status"] == "rejected" and rejected["reason"] == "erased", rejected

    if dep.name == "kafka":
        for exchange in (erased_a, erased_c, erased_h2):
            wait_for_cleaned_key(dep, exchange.receipt, keys[exchange.receipt])

    # -- no byte left ---------------------------------------------------------------------
    # erased_h2's markers are the user's reply: also in the hint of judged_h1's judgement
    gone = [m for e in (erased_a, erased_c, erased_h2) for m in e.markers]
    gone_keys = [keys[e.receipt] for e in (erased_a, erased_c, erased_h2)]
    kept = [m for e in (kept_b, kept_d) for m in e.markers]
    raw = dep.raw_topics()
    for secret in gone + gone_keys:
        assert secret not in raw, f"{secret!r} still in the log"
    assert keys[kept_b.receipt] in raw  # the same search does find what is there
    state_dir = dep.process.state_dir
    # SQLite files + WAL, the artifact store, the server's and the worker's logs
    everything = files_bytes(state_dir.parent)
    for secret in gone + gone_keys:
        assert secret not in everything, f"{secret!r} in a file under {state_dir.parent}"
    if dep.name == "embedded":
        assert keys[kept_b.receipt] in everything
    assert isinstance(claimed, InferenceRecorded) and claimed.sealed

    # -- records API: erased are a marker without content; the others read in full ------
    with dep.client() as client:
        one = client.get(f"/reef/scenarios/{dep.scenario}/records/{erased_a.receipt}")
        listed = client.get(f"/reef/scenarios/{dep.scenario}/records", params={"limit": 500})
        kept_one = client.get(f"/reef/scenarios/{dep.scenario}/records/{kept_b.receipt}")
    assert one.status_code == 200, one.text
    assert one.json()["erased"] is True and "request" not in one.json()
    assert listed.status_code == 200, listed.text
    for secret in gone:
        assert secret.decode() not in one.text + listed.text
    for marker in kept:
        assert marker.decode() in listed.text
    assert kept_b.asked in kept_one.json()["request"]["messages"][0]["content"]
    erased_rows = [r for r in listed.json()["records"] if r.get("erased")]
    assert {r["agent_record_id"] for r in erased_rows} == {
        erased_a.receipt,
        erased_c.receipt,
        erased_h2.receipt,
    }

    # -- the judgement and the report computed from it: the decision stays, the hint not --
    after = judgement_of(dep, judged_h1.receipt)
    assert isinstance(after.event, TurnJudged) and after.erased
    assert after.event.hints == [] and after.event.score == -1
    shredded = computed_report(dep, hinted)
    assert isinstance(shredded.event, ReportSubmitted) and shredded.erased
    assert shredded.event.feedback_json == "null"
    for topic in (topics.JUDGEMENTS, topics.REPORTS):
        for stored in dep.stored(topic):
            for secret in gone:
                assert secret.decode() not in repr(stored.event), (topic, stored)

    # -- samples: a sample with an erased record is unreadable, lineage stays -------------
    samples = {
        s.event.report_id: s
        for s in dep.stored(topics.SAMPLES)
        if isinstance(s.event, SampleJoined)
    }
    assert samples[two_records].erased and samples[only_c].erased
    assert not samples[only_d].erased
    # its record is kept, but its hint quotes an erased one: the trainer skips it
    assert samples[hinted].erased
    assert samples[hinted].event.feedback_json == "null"  # type: ignore[union-attr]
    assert kept_d.answered in samples[only_d].event.trajectory_json  # type: ignore[union-attr]
    two = samples[two_records].event
    assert isinstance(two, SampleJoined) and two.references == [erased_a.receipt, kept_b.receipt]
    for stored in samples.values():
        assert isinstance(stored.event, SampleJoined), stored
        for secret in gone:
            assert secret.decode() not in stored.event.trajectory_json
            assert secret.decode() not in stored.event.feedback_json

    # -- reef export / replay / audit ------------------------------------------------------
    exported = b""
    for topic in topics.ALL_TOPICS:
        out = state_dir.parent / f"export-{topic}.jsonl"
        dep.cli("export", "--topic", topic, "-o", str(out))
        exported += out.read_bytes()
    for secret in gone:
        assert secret not in exported, f"{secret!r} in reef export"
    for marker in kept:
        assert marker in exported
    rows = [json.loads(line) for line in exported.splitlines() if line.strip()]
    assert erased_a.receipt not in {r["event_id"] for r in rows if r["type"] == "InferenceRecorded"}
    (two_row,) = [r for r in rows if r["type"] == "SampleJoined" and r["report_id"] == two_records]
    assert two_row["trajectory_json"] is None and two_row["references"] == two.references

    replayed = dep.cli("replay", "--compare-live") if dep.name == "embedded" else dep.cli("replay")
    for secret in gone:
        assert secret.decode() not in replayed

    trail = json.loads(dep.cli("audit", "trail", erased_a.receipt))
    assert trail["record"]["erased"]["record_id"] == erased_a.receipt
    assert "request_json" not in trail["record"]
    assert [s["event_id"] for s in trail["samples"]] == [two.event_id]
    for secret in gone:
        assert secret.decode() not in json.dumps(trail)
    judged_trail = json.loads(dep.cli("audit", "trail", judged_h1.receipt))
    assert judged_trail["turn"]["judgement"]["score"] == -1
    assert judged_trail["turn"]["judgement"]["hints"] == 0
    for secret in gone:
        assert secret.decode() not in json.dumps(judged_trail)


CAPTURED = Path(__file__).parents[1] / "fixtures" / "agents" / "claude_code" / "interactive"


def claude_code_turns(card: str, turns: int) -> list[dict[str, Any]]:
    """A Claude Code session's requests: the captured first and tool-result requests,
    then one more tool call and result per turn (the cache breakpoint on the newest
    message, as Claude Code moves it); the first prompt holds ``card``."""
    first = json.loads((CAPTURED / "first_request.json").read_text())
    later = json.loads((CAPTURED / "tool_result_request.json").read_text())
    prompt = first["messages"][0]["content"][-1]
    prompt["text"] = f"Pay the invoice with my card {card}, then: {prompt['text']}"
    later["messages"][0] = copy.deepcopy(first["messages"][0])
    bodies = [first, later]
    while len(bodies) < turns:
        body = copy.deepcopy(bodies[-1])
        body["messages"][-1]["content"][-1].pop("cache_control")
        tool = f"toolu_e2e_{len(bodies)}"
        body["messages"] += [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": tool, "name": "Read", "input": {"file_path": "a"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "tool_use_id": tool,
                        "type": "tool_result",
                        "content": f"contents of a, read by {tool}",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ]
        bodies.append(body)
    for body in bodies:
        body["stream"] = False  # buffered: the receipt comes back as a header
    return bodies


def test_erasing_an_agent_turn_erases_what_the_later_turns_repeat(deployment: Deployment) -> None:
    dep = deployment
    digits = "4" + "".join(secrets.choice("0123456789") for _ in range(15))
    card = " ".join(digits[n : n + 4] for n in range(0, 16, 4))
    session = f"cc-{uuid.uuid4().hex[:12]}"
    bodies = claude_code_turns(card, 3)
    receipts = []
    with dep.client() as client:
        for body in bodies:
            sent = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
            headers = {"content-type": "application/json", "x-reef-tag-session": session}
            response = client.post("/v1/messages", content=sent, headers=headers)
            assert response.status_code == 200, response.text
            receipts.append(response.headers["x-reef-agent-record-id"])
        reported = client.post("/reef/report", json={"score": 1.0, "references": receipts})
    assert reported.status_code == 200, reported.text
    report_id = reported.json()["agent_record_id"]
    assert fate(dep, report_id)["status"] == "accepted"

    def record(receipt: str) -> dict[str, Any]:
        with dep.client() as client:
            got = client.get(f"/reef/scenarios/{dep.scenario}/records/{receipt}")
        assert got.status_code == 200, got.text
        found: dict[str, Any] = got.json()
        return found

    # every turn reads back as the agent sent it, the card number in each
    for receipt, body in zip(receipts, bodies, strict=True):
        assert record(receipt)["request"] == body
    assert card.encode() not in dep.raw_topics()  # sealed (and compressed) at rest

    answer = erase(dep, receipts[0])
    assert answer.status_code == 200, answer.text

    # -- every reader: the later turns are partly erased, the card number nowhere --------
    views = [record(r) for r in receipts]
    assert views[0]["erased"] is True and "request" not in views[0]
    for view, body in zip(views[1:], bodies[1:], strict=True):
        assert view["partly_erased"] is True
        request = view["request"]
        # what the first turn introduced: its prompt, and the system prompt and tools
        assert request["messages"][0] == {"erased": True}
        assert request["system"] == {"erased": True} and request["tools"] == {"erased": True}
        assert request["messages"][1:] == body["messages"][1:]  # what they said themselves
    with dep.client() as client:
        listed = client.get(f"/reef/scenarios/{dep.scenario}/records", params={"limit": 500})
    assert listed.status_code == 200, listed.text
    assert card not in json.dumps(views) + listed.text
    assert "toolu_e2e_2" in listed.text  # the last turn's own tool result reads in full
    samples = [
        s
        for s in dep.stored(topics.SAMPLES)
        if isinstance(s.event, SampleJoined) and s.event.report_id == report_id
    ]
    assert samples and all(s.erased for s in samples)
    assert all(card not in s.event.trajectory_json for s in samples)  # type: ignore[union-attr]
    exported = b""
    for topic in (topics.INFERENCE, topics.SAMPLES):
        out = dep.process.state_dir.parent / f"agent-export-{topic}.jsonl"
        dep.cli("export", "--topic", topic, "-o", str(out))
        exported += out.read_bytes()
    assert card.encode() not in exported
    assert b"toolu_e2e_2" in exported
    assert card.encode() not in dep.raw_topics()
    assert card.encode() not in files_bytes(dep.process.state_dir.parent)
    assert receipts[0] not in dep.keys(receipts)

    # -- the whole session in one call ---------------------------------------------------
    with dep.client() as client:
        path = f"/reef/scenarios/{dep.scenario}/sessions"
        whole = client.delete(f"{path}/{session}")
        unknown = client.delete(f"{path}/no-such-session-{uuid.uuid4().hex[:8]}")
    assert whole.status_code == 200, whole.text
    assert whole.json() == {
        "scenario": dep.scenario,
        "session": session,
        "erased": receipts[1:],
        "already_erased": receipts[:1],
        "not_erasable": [],
    }
    assert_reef_error(unknown, 404)
    assert all(record(r)["erased"] is True for r in receipts)
    assert dep.keys(receipts) == {}
