"""schemathesis against the OpenAPI schema a real ``reef serve`` publishes (``/reef/*``).

Every ``/reef/*`` operation of ``GET /openapi.json`` is fuzzed three ways: positive data
(bodies, headers and parameters that match the declared schemas), the same with the path
and header values pinned to a seeded scenario (so reads find records, reports and
releases instead of answering 404), and negative data (values that violate the schema).
Each response must not be a server error, must carry a declared status code, and (where
a body schema is declared, e.g. the error shape) must match it; each request must
answer within :data:`REQUEST_TIMEOUT_S`. Generation is derandomized: a run is
reproducible, in CI too.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypedDict

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.schemas import APIOperation
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.api import chat_body
from tests.support.fuzzing import REQUEST_TIMEOUT_S
from tests.support.reef_server import ReefServer

MIN_CASES = 2000
#: generated cases per operation and way (positive, pinned, negative)
EXAMPLES = {"positive": 100, "pinned": 40, "negative": 40}
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
SEED_SCENARIO = "fuzz-seed"
SEED_REPORT = "fuzz-seed-report"


@dataclass
class Seed:
    """What exists on the server before fuzzing: known names and ids to pin."""

    scenario: str
    receipts: list[str]
    report_id: str
    release_id: str


@dataclass
class Tally:
    cases: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.cases.values())


def seed(server: ReefServer) -> Seed:
    with server.client(SEED_SCENARIO) as client:
        receipts = []
        for text in ("first", "second"):
            answer = client.post("/v1/chat/completions", json=chat_body(text))
            assert answer.status_code == 200, answer.text
            receipts.append(answer.headers["x-reef-agent-record-id"])
        report = client.post(
            "/reef/report",
            json={"score": 1.0, "references": receipts, "agent_record_id": SEED_REPORT},
        )
        assert report.status_code == 200, report.text
        releases = client.get(f"/reef/scenarios/{SEED_SCENARIO}/releases")
        assert releases.status_code == 200, releases.text
    return Seed(SEED_SCENARIO, receipts, SEED_REPORT, releases.json()["releases"][0]["release_id"])


class Pinned(TypedDict, total=False):
    """Keywords of ``APIOperation.as_strategy`` that pin values."""

    path_parameters: dict[str, Any]
    headers: dict[str, Any]
    query: dict[str, Any]


def pinned_values(operation: Any, known: Seed) -> Pinned:
    """Path and header values of ``operation`` taken from the seeded scenario."""
    names = set(re.findall(r"{(\w+)}", operation.path))
    path = {
        "scenario": known.scenario,
        "record_id": known.receipts[0],
        "report_id": known.report_id,
    }
    out: Pinned = {"path_parameters": {k: v for k, v in path.items() if k in names}}
    if "x-reef-scenario" in {p.name for p in operation.headers}:
        out["headers"] = {"x-reef-scenario": known.scenario}
    if "release_id" in {p.name for p in operation.query}:
        out["query"] = {"release_id": known.release_id}
    return out


def run_operation(
    operation: Any,
    strategy: st.SearchStrategy[Any],
    examples: int,
    auth: dict[str, str],
    session: requests.Session,
    tally: Tally,
    way: str,
) -> None:
    # status codes are checked where the operation declares its errors (a route added
    # without declarations is still fuzzed for server errors and hangs)
    declared = any(code[0] in "45" for code in operation.responses.status_codes)
    checks = CHECKS if declared else [not_a_server_error]

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def check(case: Any) -> None:
        started = time.monotonic()
        try:
            response = case.call(session=session, headers=auth, timeout=REQUEST_TIMEOUT_S)
        except requests.Timeout:
            pytest.fail(f"{operation.label}: no answer in {REQUEST_TIMEOUT_S} s (hang)")
        assert time.monotonic() - started < REQUEST_TIMEOUT_S
        tally.cases[f"{way} {operation.label}"] += 1
        tally.statuses[response.status_code] += 1
        case.validate_response(response, checks=checks, headers=auth)

    check()


def test_reef_routes_conform_to_their_schema(fuzz_server: ReefServer) -> None:
    known = seed(fuzz_server)
    schema = schemathesis.openapi.from_url(
        f"{fuzz_server.base_url}/openapi.json", timeout=REQUEST_TIMEOUT_S
    ).include(path_regex="^/reef/")
    operations: list[APIOperation[Any, Any, Any, Any]] = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    labels = sorted(op.label for op in operations)
    assert len(operations) >= 12, labels
    auth = {"Authorization": f"Bearer {fuzz_server.token}"}
    tally = Tally()
    started = time.monotonic()
    with requests.Session() as session:
        for operation in operations:
            ways = {
                "positive": operation.as_strategy(GenerationMode.POSITIVE),
                "pinned": operation.as_strategy(
                    GenerationMode.POSITIVE, **pinned_values(operation, known)
                ),
                "negative": operation.as_strategy(GenerationMode.NEGATIVE),
            }
            for way, strategy in ways.items():
                run_operation(operation, strategy, EXAMPLES[way], auth, session, tally, way)
    elapsed = time.monotonic() - started
    print(
        f"\nschemathesis: {tally.total} cases over {len(operations)} /reef/* operations "
        f"in {elapsed:.1f} s; statuses {dict(sorted(tally.statuses.items()))}"
    )
    for label, count in sorted(tally.cases.items()):
        print(f"  {count:4d}  {label}")
    assert tally.total >= MIN_CASES
    assert 500 not in tally.statuses  # the check above already failed on any 5xx
    # the server is still healthy after the run
    assert httpx.get(f"{fuzz_server.base_url}/healthz", timeout=10).json() == {"ok": True}
