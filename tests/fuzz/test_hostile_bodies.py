"""Hypothesis-generated hostile requests against the inference routes (and the report).

Each case is one request built by :func:`hostile`: deep nesting, bodies just under and
over the size limit (with and without a content-length), wrong JSON types, invalid
UTF-8 and other encodings, lone surrogates, NaN/Infinity literals and out-of-range
numbers, duplicate keys, non-object and truncated JSON, empty bodies, wrong
content-types, invalid scenario names, abused ``x-reef-tag-*`` headers and bad
credentials. For every case:

* an answer comes within :data:`REQUEST_TIMEOUT_S` (no hang) and is never a 5xx: the
  scripted upstream is healthy and no generated prompt carries its fault markers, so a
  502/504 here would be Reef's own failure too;
* an error answers in the route's provider shape (OpenAI, Anthropic, Reef);
* a rejected request writes nothing to the log (end offsets of the API's topics), an
  accepted one exactly one InferenceRecorded (or ReportSubmitted);
* a case that Reef itself must refuse (``must_reject``) is refused, with the status
  the case names where it is certain (413 over the limit, 400 bad JSON, 401 no token).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from reef.core.topics import INFERENCE, REPORTS, SCENARIOS
from tests.support.api import error_shape_for, unique_scenario
from tests.support.fuzzing import MAX_BODY, REQUEST_TIMEOUT_S
from tests.support.reef_server import ReefServer

CASES = 2000
MIN_CASES = 1000
OPENAI_ROUTES = ("/v1/chat/completions", "/v1/responses")
ANTHROPIC_ROUTES = ("/v1/messages", "/v1/messages/count_tokens")
INFERENCE_ROUTES = OPENAI_ROUTES + ANTHROPIC_ROUTES
ROUTES = (*INFERENCE_ROUTES, "/reef/report")
API_TOPICS = (SCENARIOS, INFERENCE, REPORTS)
REEF_SCENARIO = "hostile-admin"
#: /reef/* routes that read a JSON body besides the report; valid bodies write nothing
REEF_BODY_ROUTES = (
    "/reef/scenarios",
    f"/reef/scenarios/{REEF_SCENARIO}/rollback",
    f"/reef/scenarios/{REEF_SCENARIO}/promote",
    f"/reef/lfs/{REEF_SCENARIO}/objects/batch",
)
REEF_CASES = 500


@dataclass(frozen=True)
class Hostile:
    """One request: what to send and what Reef must make of it."""

    kind: str
    path: str
    content: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    #: True: Reef must refuse it; None: refusing or serving are both right
    must_reject: bool | None = None
    #: the status a refusal must have, where only one is right
    status: int | None = None
    chunked: bool = False
    token: str | None = "default"
    scenario: bytes | None = None


# ---------------------------------------------------------------------------
# Building blocks


def _no_markers(text: str) -> bool:
    """The scripted upstream reads ``__status_…__`` / ``__sleep_…__`` as faults."""
    return "__" not in text


texts = st.text(max_size=40).filter(_no_markers)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


def valid_body(path: str, text: str = "hello") -> dict[str, Any]:
    """A body the route serves; on the /reef/* admin routes one that writes nothing."""
    if path == "/reef/scenarios":  # exists already: 200, nothing new
        return {"name": REEF_SCENARIO, "note": text}
    if path.endswith(("/rollback", "/promote")):  # unknown release: 404
        return {"release_id": "0" * 32, "note": text}
    if path.endswith("/objects/batch"):  # nothing asked: 200
        return {"operation": "download", "objects": [], "note": text}
    if path == "/reef/report":
        return {"score": 0.5, "feedback": text, "references": []}
    if path == "/v1/responses":
        return {"model": "gpt-4o", "input": text}
    if path.startswith("/v1/messages"):
        return {
            "model": "claude-x",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": text}],
        }
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


#: field-value bytes (RFC 9110: visible ASCII, obs-text, space, tab); anything else is not
#: HTTP and uvicorn's parser answers it (plain text) before Reef sees a request
FIELD_BYTES = bytes([9, 32, *range(0x21, 0x7F), *range(0x80, 0x100)])
routes = st.sampled_from(ROUTES)
inference_routes = st.sampled_from(INFERENCE_ROUTES)


# ---------------------------------------------------------------------------
# Categories


@st.composite
def deep_nesting(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    depth = draw(st.integers(min_value=50, max_value=MAX_BODY // 2 - 100))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    if opener == b"[":
        nested = b"[" * depth + b"]" * depth
    else:
        depth = min(depth, MAX_BODY // 6)
        nested = opener * depth + b"1" + closer * depth
    key = b"metadata" if path == "/reef/report" else b"extra"
    body = dumps(valid_body(path))[:-1] + b', "' + key + b'": ' + nested + b"}"
    return Hostile("deep-nesting", path, body, must_reject=True if depth > 1000 else None)


@st.composite
def near_the_limit(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    size = draw(st.integers(min_value=MAX_BODY - 64, max_value=MAX_BODY + 64))
    body = valid_body(path, "")
    skeleton = dumps(valid_body(path, ""))
    filler = "x" * max(0, size - len(skeleton))
    body = valid_body(path, filler)
    content = dumps(body)
    over = len(content) > MAX_BODY
    return Hostile(
        "near-limit",
        path,
        content,
        must_reject=True if over else None,
        status=413 if over else None,
        chunked=draw(st.booleans()),
    )


def receipt_of(response: httpx.Response) -> str | None:
    """The receipt of a served exchange: a header, or in the stream's receipt frame when
    the reply was streamed (a hostile body may well set ``"stream": true``)."""
    header: str | None = response.headers.get("x-reef-agent-record-id")
    if header or not response.headers.get("content-type", "").startswith("text/event-stream"):
        return header
    for line in response.text.splitlines():
        if line.startswith("data: {") and '"reef"' in line:
            reef = json.loads(line.removeprefix("data: ")).get("reef")
            if isinstance(reef, dict) and reef.get("agent_record_id"):
                return str(reef["agent_record_id"])
    return None


@st.composite
def wrong_types(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    body = valid_body(path)
    for key in draw(st.lists(st.sampled_from(sorted(set(body) | {"stream", "tools"})), min_size=1)):
        body[key] = draw(json_values)
    if path == "/reef/report" and report_refused_whatever_else(body):
        return Hostile("wrong-types", path, dumps(body), must_reject=True, status=400)
    return Hostile("wrong-types", path, dumps(body))


def report_refused_whatever_else(body: dict[str, Any]) -> bool:
    """A report body refused by the score and feedback rules alone: a score that is not a
    number, or no score (absent or null) and no feedback (empty text, an empty object, or
    neither a string nor an object)."""
    score = body.get("score")
    if score is not None:
        return isinstance(score, bool) or not isinstance(score, int | float)
    feedback = body.get("feedback", "")
    if isinstance(feedback, str):
        return not feedback.strip()
    return not (isinstance(feedback, dict) and feedback)


@st.composite
def bad_encoding(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    text = json.dumps(valid_body(path, draw(texts) + "é€😀"), ensure_ascii=False)
    how = draw(st.sampled_from(["utf-16", "utf-16-le", "utf-32", "utf-8-sig", "latin-1", "cut"]))
    if how == "cut":  # a multi-byte character cut in half, and stray continuation bytes
        raw = text.encode()
        content = raw.replace("€".encode(), "€".encode()[:2]) + b"\x80"
    else:
        content = text.encode(how, errors="replace")
    return Hostile("encoding", path, content, must_reject=True, status=400)


@st.composite
def lone_surrogates(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    body = dumps(valid_body(path))
    escape = draw(st.sampled_from([b"\\ud800", b"\\udfff", b"\\uDBFF", b"\\ud83d x"]))
    field_ = draw(st.sampled_from([b"model", b"agent_record_id", b"feedback", b"meta\\ud800"]))
    value = b'"' + escape + b'"'
    if field_ == b"agent_record_id" and path != "/reef/report":
        field_ = b"user"
    content = body[:-1] + b', "' + field_ + b'": ' + value + b"}"
    return Hostile("surrogate", path, content)


@st.composite
def non_finite(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    literal = draw(
        st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e999", b"9" * 400])
    )
    where = draw(st.sampled_from(["score", "nested", "top"]))
    body = dumps(valid_body(path))[:-1]
    if where == "score" and path == "/reef/report":
        body = body.replace(b'"score": 0.5', b'"score": ' + literal)
        content = body + b"}"
    elif where == "nested":
        content = body + b', "metadata": {"x": [1, ' + literal + b"]}}"
    else:
        content = body + b', "temperature": ' + literal + b"}"
    # NaN/Infinity are not JSON, 1e400 does not fit a double; a 400-digit integer is
    # JSON (Python keeps it exact) but not a score
    if literal == b"9" * 400 and not (where == "score" and path == "/reef/report"):
        return Hostile("non-finite", path, content)
    return Hostile("non-finite", path, content, must_reject=True, status=400)


@st.composite
def duplicate_keys(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    body = dumps(valid_body(path))[:-1]
    key = draw(st.sampled_from([b"model", b"stream", b"messages", b"score", b"references"]))
    values = draw(st.lists(json_values, min_size=1, max_size=3))
    for value in values:
        body += b', "' + key + b'": ' + dumps(value)
    return Hostile("duplicate-keys", path, body + b"}")


@st.composite
def not_an_object(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    value = draw(json_values.filter(lambda v: not isinstance(v, dict)))
    return Hostile("not-object", path, dumps(value), must_reject=True, status=400)


@st.composite
def truncated(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    body = dumps(valid_body(path, draw(texts)))
    cut = draw(st.integers(min_value=0, max_value=len(body) - 1))
    return Hostile("truncated", path, body[:cut], must_reject=True, status=400)


@st.composite
def garbage(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    content = draw(
        st.sampled_from([b"", b" ", b"\n\t", b"null", b"{", b"}", b"{}}", b"{,}", b"\x00"])
        | st.binary(max_size=64)
    )
    try:
        parsed = json.loads(content)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return Hostile("garbage", path, content)
    return Hostile("garbage", path, content, must_reject=True, status=400)


@st.composite
def content_types(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    kind = draw(
        st.sampled_from(
            [
                b"text/plain",
                b"application/x-www-form-urlencoded",
                b"multipart/form-data; boundary=x",
                b"application/xml",
                b"",
                b"application/json; charset=utf-16",
                b"\xff\xfe/bad",
            ]
        )
    )
    form = draw(st.booleans())
    if form:
        return Hostile(
            "content-type",
            path,
            b"model=gpt-4o&messages=hi",
            headers=(("content-type", kind),),
            must_reject=True,
            status=400,
        )
    return Hostile("content-type", path, dumps(valid_body(path)), headers=(("content-type", kind),))


invalid_names = st.one_of(
    st.sampled_from(
        [b"", b" ", b"-x", b".x", b"_x", b"a b", b"a/b", b"a;b", b"x" * 129, b"\xc3\xbc", b"a\tb"]
    ),
    st.text(min_size=1, max_size=20)
    .filter(lambda s: not s[0].isascii() or not s[0].isalnum() or not s.isascii())
    .map(lambda s: s.encode("utf-8")),
)


@st.composite
def bad_scenario(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    name = draw(invalid_names)
    # header values cannot hold CR/LF/NUL; the client refuses them before sending
    # (the client refuses leading/trailing blanks; the server would strip them anyway)
    name = bytes(b for b in name if b in FIELD_BYTES).strip(b" \t")
    if name.strip() and name.strip() == name and name.isascii():
        from reef.core.ids import valid_scenario

        if valid_scenario(name.decode()):
            name = b"-" + name
    return Hostile(
        "bad-scenario", path, dumps(valid_body(path)), scenario=name, must_reject=True, status=400
    )


tag_names = st.text(
    alphabet=st.characters(
        min_codepoint=33, max_codepoint=126, exclude_characters=':()<>@,;\\"/[]?={}'
    ),
    max_size=40,
)
tag_values = st.binary(max_size=200).map(
    lambda b: bytes(FIELD_BYTES[c % len(FIELD_BYTES)] for c in b).strip(b" \t")
)


@st.composite
def tag_abuse(draw: st.DrawFn, paths: st.SearchStrategy[str] = inference_routes) -> Hostile:
    path = draw(paths)
    count = draw(st.integers(min_value=1, max_value=60))
    headers = tuple(("x-reef-tag-" + draw(tag_names), draw(tag_values)) for _ in range(count))
    if draw(st.booleans()):  # the same tag twice, in different case, other values
        headers += (("X-Reef-Tag-Dup", b"one"), ("x-reef-tag-dup", b"two"))
    return Hostile("tags", path, dumps(valid_body(path)), headers=headers)


@st.composite
def bad_credentials(draw: st.DrawFn, paths: st.SearchStrategy[str] = routes) -> Hostile:
    path = draw(paths)
    token = draw(
        st.sampled_from(["", "Bearer", "Basic !!!", "Basic bm8tY29sb24=", "bearer x"])
        | st.text(max_size=30)
        .filter(lambda s: s.isprintable() and s.isascii())
        # a header value has no whitespace at its ends (RFC 9110 5.5): an HTTP client
        # refuses to send one, so such a token never reaches a server
        .map(lambda s: f"Bearer wrong-{s}".rstrip())
    )
    headers: tuple[tuple[str, bytes], ...] = (("authorization", token.encode()),) if token else ()
    if draw(st.booleans()):
        headers += (("x-api-key", b"wrong-key"),)
    return Hostile(
        "credentials",
        path,
        dumps(valid_body(path)),
        headers=headers,
        token=None,
        must_reject=True,
        status=401,
    )


def hostile() -> st.SearchStrategy[Hostile]:
    return st.one_of(
        deep_nesting(),
        near_the_limit(),
        wrong_types(),
        bad_encoding(),
        lone_surrogates(),
        non_finite(),
        duplicate_keys(),
        not_an_object(),
        truncated(),
        garbage(),
        content_types(),
        bad_scenario(),
        tag_abuse(),
        bad_credentials(),
    )


def hostile_admin() -> st.SearchStrategy[Hostile]:
    """What the /reef/* body routes must refuse (or serve without writing)."""
    paths = st.sampled_from(REEF_BODY_ROUTES)
    return st.one_of(
        deep_nesting(paths),
        near_the_limit(paths),
        bad_encoding(paths),
        lone_surrogates(paths),
        non_finite(paths),
        duplicate_keys(paths),
        not_an_object(paths),
        truncated(paths),
        garbage(paths),
        content_types(paths),
        bad_credentials(paths),
    )


# ---------------------------------------------------------------------------
# The test


@dataclass
class Tally:
    kinds: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[tuple[str, int]] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.kinds.values())


def send(client: httpx.Client, server: ReefServer, scenario: str, case: Hostile) -> httpx.Response:
    headers: list[tuple[str, bytes]] = []
    if case.token == "default":
        headers.append(("authorization", f"Bearer {server.token}".encode()))
    headers.append(
        ("x-reef-scenario", case.scenario if case.scenario is not None else scenario.encode())
    )
    if not any(name.lower() == "content-type" for name, _ in case.headers):
        headers.append(("content-type", b"application/json"))
    headers += case.headers

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(case.content), 997):
            yield case.content[start : start + 997]

    content: Any = chunks() if case.chunked else case.content
    try:
        # httpx takes str names with bytes values; its stub wants both of one kind
        return client.post(case.path, content=content, headers=headers)  # type: ignore[arg-type]
    except httpx.TimeoutException:
        pytest.fail(f"{case.kind} {case.path}: no answer in {REQUEST_TIMEOUT_S} s (hang)")


def written(before: dict[str, dict[int, int]], after: dict[str, dict[int, int]]) -> dict[str, int]:
    return {topic: sum(after[topic].values()) - sum(before[topic].values()) for topic in before}


def check_error(case: Hostile, response: httpx.Response, label: str) -> None:
    """JSON in the route's shape (the Git LFS batch route may answer LFS's own)."""
    content_type = response.headers.get("content-type", "")
    assert content_type.startswith(("application/json", "application/vnd.git-lfs+json")), label
    if "/objects/batch" in case.path and "error" not in response.json():
        assert isinstance(response.json().get("message"), str), label
    else:
        error_shape_for(case.path)(response, response.status_code)
    if case.status is not None:
        # the LFS batch API calls a body it cannot read 422
        lfs = "/objects/batch" in case.path and case.status == 400
        assert response.status_code == (422 if lfs else case.status), label


def fuzz(
    server: ReefServer, scenario: str, strategy: st.SearchStrategy[Hostile], cases: int
) -> Tally:
    """Send ``cases`` generated requests; check each; return what happened."""
    tally = Tally()
    started = time.monotonic()
    with httpx.Client(base_url=server.base_url, timeout=REQUEST_TIMEOUT_S) as client:

        @settings(
            max_examples=cases,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def check(case: Hostile) -> None:
            before = server.end_offsets(API_TOPICS)
            response = send(client, server, scenario, case)
            after = server.end_offsets(API_TOPICS)
            status = response.status_code
            tally.kinds[case.kind] += 1
            tally.outcomes[(case.kind, status)] += 1
            label = f"{case.kind} {case.path} → {status}: {response.text[:300]!r}"
            assert status < 500, label
            delta = written(before, after)
            if status >= 400:
                check_error(case, response, label)
                assert not any(delta.values()), f"{label}: a refused request wrote {delta}"
                return
            assert case.must_reject is not True, f"{label}: served what must be refused"
            assert status in (200, 201), label
            if case.path in REEF_BODY_ROUTES:
                assert not any(delta.values()), f"{label}: wrote {delta}"
                return
            topic = REPORTS if case.path == "/reef/report" else INFERENCE
            assert delta == {t: int(t == topic) for t in API_TOPICS}, (label, delta)
            if case.path != "/reef/report":
                assert receipt_of(response), label
            tally.accepted[topic] += 1

        check()

    print(f"\n{tally.total} hostile requests in {time.monotonic() - started:.1f} s")
    for kind, count in sorted(tally.kinds.items()):
        statuses = {s: n for (k, s), n in sorted(tally.outcomes.items()) if k == kind}
        print(f"  {count:4d}  {kind:15s} {statuses}")
    return tally


def read_back(server: ReefServer, scenario: str) -> list[dict[str, Any]]:
    """Every record of the scenario through the records route (each page must be 200)."""
    records: list[dict[str, Any]] = []
    after = "-1.-1"
    with server.client() as client:
        while True:
            page = client.get(
                f"/reef/scenarios/{scenario}/records", params={"after": after, "limit": 500}
            )
            assert page.status_code == 200, page.text[:500]
            body = page.json()
            records += body["records"]
            if not body["records"]:
                return records
            after = body["next_after"]


def test_hostile_inference_requests(fuzz_server: ReefServer) -> None:
    server = fuzz_server
    scenario = unique_scenario("hostile")
    with server.client() as client:
        created = client.post("/reef/scenarios", json={"name": scenario})
    assert created.status_code == 201, created.text
    tally = fuzz(server, scenario, hostile(), CASES)
    assert tally.total >= MIN_CASES
    # every accepted exchange and report is in the log once, and reads back as JSON
    assert len(server.inference(scenario)) == tally.accepted[INFERENCE]
    records = read_back(server, scenario)
    kinds = Counter(record["request_type"] for record in records)
    assert kinds == {"inference": tally.accepted[INFERENCE], "report": tally.accepted[REPORTS]}
    assert httpx.get(f"{server.base_url}/healthz", timeout=10).json() == {"ok": True}


def test_hostile_bodies_on_reef_admin_routes(fuzz_server: ReefServer) -> None:
    with fuzz_server.client() as client:
        created = client.post("/reef/scenarios", json={"name": REEF_SCENARIO})
    assert created.status_code in (200, 201), created.text
    tally = fuzz(fuzz_server, REEF_SCENARIO, hostile_admin(), REEF_CASES)
    assert tally.total >= REEF_CASES // 2
