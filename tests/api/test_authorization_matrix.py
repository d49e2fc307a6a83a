"""The authorisation matrix: every route x every wrong credential.

The routes come from the running app (``GET /openapi.json``) and from the app's own
route table (``reef.api.app.create_app``: routes hidden from the schema count too); the
test fails on a route missing from :data:`RULES` and on a rule naming no route, so a new
route cannot ship without its row. For each route:

* no token → 401 ``missing_token``; an unknown token → 401 ``invalid_token``;
* a token holding every scope except the needed one(s), bound to the route's scenario
  → 403 ``insufficient_scope``;
* a token holding every scope, bound to other scenarios → 403 ``scenario_forbidden``
  (listings answer 200 without the scenario; deployment-wide ``/metrics`` refuses any
  token bound to scenarios);
* the right credential (only the needed scope, bound to the route's scenario) succeeds.

Each wrong credential is tried in every way the route accepts a token (Bearer;
``x-api-key`` on the Anthropic routes; HTTP Basic on the Git LFS routes). Errors must be
in the route family's shape (the HTTP contract: provider shapes on /v1/*, Reef's on the rest)
and no rejected request may write to the log. The app is the one ``reef serve`` builds,
run in process on the embedded log (tests/support/embedded_app.py); the policy itself is
documented in reef/api/auth.py and docs/security.md "Authorisation".
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.core.topics import LOG_TOPICS, RELEASES, SAMPLES
from tests.support.api import chat_body, error_shape_for, messages_body
from tests.support.embedded_app import EmbeddedApp
from tests.support.reef_server import Offsets

SCOPES = ("inference", "report", "read", "admin")
#: every topic and table the API appends to (data keys included); the processors'
#: outputs are left out: they follow earlier, accepted requests on their own time
WATCHED = tuple(t for t in LOG_TOPICS if t not in (SAMPLES, RELEASES))
SEED_FILES = {"system_prompt.md": "You are the matrix agent.\n", "notes/a.md": "# A\n"}
ANTHROPIC_TYPES = {401: "authentication_error", 403: "permission_error"}
NO_RELEASE = "0" * 32
#: a session no exchange ever named: the authorised call gets the handler's own 404
NO_SESSION = "no-such-session"


@dataclass(frozen=True, slots=True)
class Rule:
    """What a route needs: one of ``scopes`` (empty: public), and how it scopes scenarios.

    ``scenario``: ``path`` / ``header`` / ``body`` name one scenario (a token bound to
    others gets 403); ``listing`` filters what it shows; ``deployment`` spans every
    scenario (tokens bound to scenarios get 403); ``none`` shows no scenario data.
    """

    scopes: frozenset[str]
    scenario: str


def rule(scenario: str, *scopes: str) -> Rule:
    return Rule(frozenset(scopes), scenario)


PUBLIC = rule("none")
RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/docs/oauth2-redirect"): PUBLIC,
    ("GET", "/redoc"): PUBLIC,
    ("GET", "/metrics"): rule("deployment", "read"),
    ("GET", "/reef/status"): rule("listing", "read"),
    ("POST", "/v1/chat/completions"): rule("header", "inference"),
    ("POST", "/v1/responses"): rule("header", "inference"),
    ("POST", "/v1/messages"): rule("header", "inference"),
    ("POST", "/v1/messages/count_tokens"): rule("header", "inference"),
    ("GET", "/v1/models"): rule("none", "inference"),
    ("POST", "/reef/report"): rule("header", "report"),
    ("GET", "/reef/reports/{report_id}"): rule("header", "report", "read"),
    ("GET", "/reef/scenarios"): rule("listing", "read"),
    ("POST", "/reef/scenarios"): rule("body", "admin"),
    ("GET", "/reef/scenarios/{scenario}/releases"): rule("path", "read"),
    ("GET", "/reef/scenarios/{scenario}/records"): rule("path", "read"),
    ("GET", "/reef/scenarios/{scenario}/records/{record_id}"): rule("path", "read"),
    ("DELETE", "/reef/scenarios/{scenario}/records/{record_id}"): rule("path", "admin"),
    ("DELETE", "/reef/scenarios/{scenario}/sessions/{session_id}"): rule("path", "admin"),
    ("POST", "/reef/scenarios/{scenario}/rollback"): rule("path", "admin"),
    ("POST", "/reef/scenarios/{scenario}/promote"): rule("path", "admin"),
    ("GET", "/reef/scenarios/{scenario}/rollouts"): rule("path", "read"),
    ("POST", "/reef/scenarios/{scenario}/rollouts"): rule("path", "admin"),
    ("POST", "/reef/scenarios/{scenario}/rollouts/{rollout_id}/promote"): rule("path", "admin"),
    ("POST", "/reef/scenarios/{scenario}/rollouts/{rollout_id}/rollback"): rule("path", "admin"),
    ("GET", "/reef/harness"): rule("header", "read"),
    ("GET", "/reef/harness/releases"): rule("header", "read"),
    ("GET", "/reef/harness/versions"): rule("header", "read"),
    ("GET", "/reef/harness/install"): rule("header", "read"),
    ("POST", "/reef/lfs/{scenario}/objects/batch"): rule("path", "read"),
    ("GET", "/reef/lfs/{scenario}/objects/{oid}"): rule("path", "read"),
}
ROUTE_IDS = [f"{method} {path}" for method, path in RULES]


# ---------------------------------------------------------------------------
# Who is who


@dataclass(frozen=True, slots=True)
class Cast:
    """Scenario names and tokens of one module run."""

    tag: str
    tokens: dict[str, str]

    @property
    def mine(self) -> str:
        """The scenario the route is called on; the right credentials are bound to it."""
        return f"{self.tag}a-mine"

    @property
    def theirs(self) -> str:
        return f"{self.tag}b-theirs"

    def spec(self) -> str:
        """REEF_TOKENS: single scopes and all-but-needed scopes bound to ``a*``, every
        scope bound to ``b*`` (other scenarios), and read on every scenario."""
        mine, theirs = f"{self.tag}a*", f"{self.tag}b*"
        entries = []
        for name, token in self.tokens.items():
            kind, _, scopes = name.partition(":")
            glob = {"only": mine, "without": mine, "elsewhere": theirs, "everywhere": "*"}[kind]
            entries.append(f"{token}:{scopes}@{glob}")
        return ",".join(entries)

    def only(self, scope: str) -> str:
        return self.tokens[f"only:{scope}"]

    def without(self, scopes: frozenset[str]) -> str:
        return self.tokens[f"without:{'+'.join(s for s in SCOPES if s not in scopes)}"]

    @property
    def elsewhere(self) -> str:
        return self.tokens[f"elsewhere:{'+'.join(SCOPES)}"]

    @property
    def read_everywhere(self) -> str:
        return self.tokens["everywhere:read"]


def make_cast() -> Cast:
    tag = f"az{secrets.token_hex(4)}"
    names = [f"only:{scope}" for scope in SCOPES]
    needs = {r.scopes for r in RULES.values() if r.scopes}
    names += [f"without:{'+'.join(s for s in SCOPES if s not in need)}" for need in needs]
    names += [f"elsewhere:{'+'.join(SCOPES)}", "everywhere:read"]
    return Cast(tag, {name: f"tok-{secrets.token_hex(10)}" for name in names})


@pytest.fixture(scope="module")
def cast() -> Cast:
    return make_cast()


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("matrix-seed")
    for path, text in SEED_FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


@pytest.fixture(scope="module")
def app_options(cast: Cast, seed_dir: Path) -> dict[str, Any]:
    return {"tokens": cast.spec(), "env": {"REEF_SEED_DIR": str(seed_dir)}}


def log_ends(reef_app: EmbeddedApp) -> Offsets:
    return reef_app.end_offsets(WATCHED)


@pytest.fixture(scope="module")
def http(reef_app: EmbeddedApp) -> Iterator[httpx.Client]:
    with reef_app.bare_client(timeout=60.0) as client:
        yield client


@dataclass(frozen=True, slots=True)
class World:
    """What exists before the matrix runs: one exchange and one report per scenario."""

    receipts: dict[str, str]
    #: a second exchange of the routes' scenario, for the erase route to erase
    erasable: str
    reports: dict[str, str]
    creation: dict[str, str]
    oid: str
    oid_bytes: bytes


@pytest.fixture(scope="module")
def world(reef_app: EmbeddedApp, http: httpx.Client, cast: Cast) -> World:
    receipts, reports, creation = {}, {}, {}
    for name in (cast.mine, cast.theirs):
        headers = reef_app.headers(name)
        answered = http.post("/v1/chat/completions", json=chat_body("hello"), headers=headers)
        assert answered.status_code == 200, answered.text
        receipts[name] = answered.headers["x-reef-agent-record-id"]
        body = {"score": 1.0, "feedback": "ok", "references": [receipts[name]]}
        reported = http.post("/reef/report", json=body, headers=headers)
        assert reported.status_code == 200, reported.text
        reports[name] = reported.json()["agent_record_id"]
        harness = http.get("/reef/harness", headers=headers)
        assert harness.status_code == 200, harness.text
        assert harness.json()["files"] == SEED_FILES
        creation[name] = harness.json()["release_id"]
    answered = http.post(
        "/v1/chat/completions", json=chat_body("erase me"), headers=reef_app.headers(cast.mine)
    )
    assert answered.status_code == 200, answered.text
    erasable = answered.headers["x-reef-agent-record-id"]
    seed = SEED_FILES["system_prompt.md"].encode()
    oid = hashlib.sha256(seed).hexdigest()
    return World(receipts, erasable, reports, creation, oid, seed)


# ---------------------------------------------------------------------------
# Calls


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    body: Any
    headers: dict[str, str]


def call_for(method: str, template: str, cast: Cast, world: World) -> Call:
    """A well-formed request on ``cast.mine`` (credentials are added by the caller)."""
    mine = cast.mine
    record = world.erasable if method == "DELETE" else world.receipts[mine]
    path = template.format(
        scenario=mine,
        record_id=record,
        report_id=world.reports[mine],
        oid=world.oid,
        rollout_id=NO_RELEASE,
        session_id=NO_SESSION,
    )
    body: Any = None
    if template == "/v1/chat/completions":
        body = chat_body("matrix")
    elif template == "/v1/responses":
        body = {"model": "gpt-4o", "input": "matrix"}
    elif template.startswith("/v1/messages"):
        body = messages_body("matrix")
    elif template == "/reef/report":
        body = {"score": 0.5, "feedback": "matrix", "references": [world.receipts[mine]]}
    elif method == "POST" and template == "/reef/scenarios":
        body = {"name": mine}
    elif method == "POST" and template.endswith("/rollouts"):
        body = {"release_id": world.creation[mine], "share": 0.2}
    elif "/rollouts/" in template:
        pass  # no body; the rollout does not exist: the handler's own 404
    elif template.endswith("/rollback") or template.endswith("/promote"):
        body = {"release_id": world.creation[mine]}
    elif template == "/reef/harness/install":
        path += "?adapter=generic"
    elif template.endswith("/objects/batch"):
        body = {
            "operation": "download",
            "transfers": ["basic"],
            "objects": [{"oid": world.oid, "size": len(world.oid_bytes)}],
        }
    return Call(method, path, body, {"x-reef-scenario": mine})


def styles(template: str) -> list[str]:
    """Every way this route accepts a token."""
    extra = ["x-api-key"] if template.startswith("/v1/messages") else []
    extra += ["basic"] if template.startswith("/reef/lfs/") else []
    return ["bearer", *extra]


def credential(style: str, token: str) -> dict[str, str]:
    if style == "x-api-key":
        return {"x-api-key": token, "anthropic-version": "2023-06-01"}
    if style == "basic":
        return {"Authorization": "Basic " + base64.b64encode(f"git:{token}".encode()).decode()}
    return {"Authorization": f"Bearer {token}"}


def send(http: httpx.Client, call: Call, auth: dict[str, str]) -> httpx.Response:
    return http.request(call.method, call.path, json=call.body, headers={**call.headers, **auth})


def assert_refused(response: httpx.Response, template: str, status: int, code: str) -> None:
    body = error_shape_for(template)(response, status)
    if template.startswith("/v1/messages"):
        assert body["error"]["type"] == ANTHROPIC_TYPES[status], body
    else:
        assert body["error"]["code"] == code, body
    if status == 401:
        assert response.headers.get("www-authenticate") == "Bearer", response.headers


def assert_succeeded(
    response: httpx.Response,
    method: str,
    template: str,
    cast: Cast,
    world: World,
) -> None:
    """The right credential got the route's real answer."""
    mine, theirs = cast.mine, cast.theirs
    where = (method, template, response.status_code, response.text[:400])
    if method == "POST" and template.endswith("/rollouts"):  # no controller runs here
        assert response.status_code == 409, where
        assert response.json()["error"]["code"] == "rollouts_disabled", where
        return
    if "/rollouts/" in template:
        assert response.status_code == 404, where
        assert response.json()["error"]["code"] == "unknown_rollout", where
        return
    if template.endswith("/sessions/{session_id}"):  # no such session: the handler's own 404
        assert response.status_code == 404, where
        assert response.json()["error"]["code"] == "unknown_session", where
        return
    if template.endswith("/promote"):  # nothing is pending review: the handler's own 409
        assert response.status_code == 409 and response.json()["error"]["code"] == "not_pending"
        return
    assert response.status_code == 200, where
    if template.startswith("/v1/") and template != "/v1/models":
        assert response.headers.get("x-reef-agent-record-id"), where
    elif template == "/reef/scenarios" and method == "GET":
        names = {s["scenario"] for s in response.json()["scenarios"]}
        assert mine in names and theirs not in names, where
    elif template == "/reef/status":
        assert mine in response.json()["scenarios"], where
        assert theirs not in response.json()["scenarios"], where
    elif template.endswith("/records"):
        ids = {r["agent_record_id"] for r in response.json()["records"]}
        assert world.receipts[mine] in ids and world.receipts[theirs] not in ids, where
    elif template.endswith("/records/{record_id}") and method == "DELETE":
        assert response.json()["agent_record_id"] == world.erasable, where
        assert response.json()["erased"] is True, where
    elif template.endswith("/records/{record_id}"):
        assert response.json()["agent_record_id"] == world.receipts[mine], where
    elif template == "/reef/reports/{report_id}":
        assert response.json()["agent_record_id"] == world.reports[mine], where
    elif template.endswith("/objects/{oid}"):
        assert response.content == world.oid_bytes, where
    elif template == "/reef/harness/install":
        assert response.text.startswith("#!/bin/sh"), where
    elif template.endswith("/objects/batch"):
        (item,) = response.json()["objects"]
        assert "download" in item["actions"], where
    elif template == "/metrics":
        assert "reef_requests" in response.text, where
    elif template.endswith("/rollouts"):
        assert response.json() == {"scenario": mine, "rollouts": []}, where


def assert_other_scenarios_hidden(response: httpx.Response, template: str, cast: Cast) -> None:
    """A token bound to ``theirs`` sees ``theirs`` but not ``mine`` in a listing."""
    assert response.status_code == 200, (template, response.status_code, response.text)
    if template == "/reef/scenarios":
        names = {s["scenario"] for s in response.json()["scenarios"]}
    else:
        body = response.json()
        names = set(body["scenarios"])
        assert {"processors", "samples_pending", "trainer"}.isdisjoint(body), body
        assert "digest" not in body["projection"], body
    assert cast.theirs in names and cast.mine not in names, names


# ---------------------------------------------------------------------------
# The route list


def app_routes() -> set[tuple[str, str]]:
    """Every (method, path) the app routes, hidden ones included (HEAD beside GET aside)."""
    from reef.settings import Settings
    from reef.wiring import create_app

    app = create_app(Settings.of(token="route-listing"))
    found: set[tuple[str, str]] = set()

    def walk(routes: list[Any]) -> None:
        for route in routes:
            included = getattr(route, "original_router", None)
            if included is not None:  # FastAPI >= 0.165 wraps included routers
                walk(included.routes)
                continue
            assert hasattr(route, "path") and hasattr(route, "methods"), route
            methods = set(route.methods or ())
            if "GET" in methods:
                methods.discard("HEAD")
            found.update((method, route.path) for method in methods)

    walk(list(app.routes))
    return found


def served_routes(http: httpx.Client) -> set[tuple[str, str]]:
    """Every (method, path) of the running app's OpenAPI document."""
    answered = http.get("/openapi.json")
    assert answered.status_code == 200, answered.text
    verbs = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}
    return {
        (method.upper(), path)
        for path, item in answered.json()["paths"].items()
        for method in item
        if method in verbs
    }


def test_every_route_is_in_the_matrix(http: httpx.Client) -> None:
    served = served_routes(http)
    routed = app_routes()
    assert served <= routed, f"OpenAPI names routes the app lacks: {sorted(served - routed)}"
    missing = sorted((served | routed) - set(RULES))
    assert not missing, f"routes without a row in the authorisation matrix: {missing}"
    stale = sorted(set(RULES) - routed)
    assert not stale, f"matrix rows naming no route: {stale}"


# ---------------------------------------------------------------------------
# The matrix


@pytest.mark.parametrize(("method", "template"), list(RULES), ids=ROUTE_IDS)
def test_route_refuses_every_wrong_credential(
    reef_app: EmbeddedApp,
    http: httpx.Client,
    cast: Cast,
    world: World,
    method: str,
    template: str,
) -> None:
    rule_ = RULES[(method, template)]
    call = call_for(method, template, cast, world)
    before = log_ends(reef_app)

    if not rule_.scopes:  # public: answers whoever asks, token or not
        for auth in ({}, credential("bearer", "nope"), credential("bearer", cast.elsewhere)):
            answered = send(http, call, auth)
            assert answered.status_code == 200, (template, answered.text[:300])
        assert log_ends(reef_app) == before, f"{template} wrote to the log"
        return

    assert_refused(send(http, call, {}), template, 401, "missing_token")
    for style in styles(template):
        wrong = f"{cast.only(next(iter(rule_.scopes)))}x"  # a near miss of a real token
        assert_refused(send(http, call, credential(style, wrong)), template, 401, "invalid_token")
        assert_refused(
            send(http, call, credential(style, f"nope-{secrets.token_hex(4)}")),
            template,
            401,
            "invalid_token",
        )
        scope_miss = send(http, call, credential(style, cast.without(rule_.scopes)))
        assert_refused(scope_miss, template, 403, "insufficient_scope")
        elsewhere = send(http, call, credential(style, cast.elsewhere))
        if rule_.scenario in ("path", "header", "body", "deployment"):
            assert_refused(elsewhere, template, 403, "scenario_forbidden")
        elif rule_.scenario == "listing":
            assert_other_scenarios_hidden(elsewhere, template, cast)
        else:  # no scenario data: a token bound to other scenarios may call it
            assert elsewhere.status_code == 200, (template, elsewhere.text[:300])
    log_after = log_ends(reef_app)
    assert log_after == before, f"{method} {template}: a refused request wrote to the log"

    for style in styles(template):
        rights = (
            [cast.read_everywhere]
            if rule_.scenario == "deployment"
            else [cast.only(scope) for scope in sorted(rule_.scopes)]
        )
        for token in rights:
            answered = send(http, call, credential(style, token))
            assert_succeeded(answered, method, template, cast, world)
    if rule_.scenario == "deployment":  # read, but bound to scenarios: refused
        bound = send(http, call, credential("bearer", cast.only("read")))
        assert_refused(bound, template, 403, "scenario_forbidden")


def hostile(call: Call, template: str) -> Call:
    """The same call made invalid in every way the route validates (name, body, query)."""
    path = call.path.replace(f"/{call.headers['x-reef-scenario']}/", "/-bad name/")
    if template.endswith("/records"):
        path += "?limit=0&after=x"
    body = b"{not json" if call.method == "POST" else None
    return Call(call.method, path, body, {"x-reef-scenario": "-bad name"})


@pytest.mark.parametrize(
    ("method", "template"), [r for r in RULES if RULES[r].scopes], ids=lambda r: str(r)
)
def test_authentication_comes_before_validation(
    reef_app: EmbeddedApp,
    http: httpx.Client,
    cast: Cast,
    world: World,
    method: str,
    template: str,
) -> None:
    """A caller without a valid token learns nothing from validation errors: 401 first,
    and a wrong scope is 403 before any 400."""
    call = hostile(call_for(method, template, cast, world), template)
    before = log_ends(reef_app)
    for auth, status, code in (
        ({}, 401, "missing_token"),
        (credential("bearer", "nope"), 401, "invalid_token"),
        (
            credential("bearer", cast.without(RULES[(method, template)].scopes)),
            403,
            "insufficient_scope",
        ),
    ):
        answered = http.request(
            call.method, call.path, content=call.body, headers={**call.headers, **auth}
        )
        assert_refused(answered, template, status, code)
    assert log_ends(reef_app) == before


# ---------------------------------------------------------------------------
# Isolation between scenarios


def test_a_report_id_of_one_scenario_is_404_under_another(
    reef_app: EmbeddedApp, http: httpx.Client, cast: Cast, world: World
) -> None:
    path = f"/reef/reports/{world.reports[cast.mine]}"
    for token in (reef_app.token, cast.elsewhere):
        assert token is not None
        answered = http.get(path, headers=reef_app.headers(cast.theirs, token))
        body = error_shape_for(path)(answered, 404)
        assert body["error"]["code"] == "unknown_report"
    assert http.get(path, headers=reef_app.headers(cast.mine)).status_code == 200


def test_a_record_of_one_scenario_is_404_under_another(
    reef_app: EmbeddedApp, http: httpx.Client, cast: Cast, world: World
) -> None:
    theirs, mine = cast.theirs, cast.mine
    for record in (world.receipts[mine], world.reports[mine]):
        answered = http.get(
            f"/reef/scenarios/{theirs}/records/{record}", headers=reef_app.headers()
        )
        assert error_shape_for("/reef")(answered, 404)["error"]["code"] == "unknown_record"
        owned = http.get(f"/reef/scenarios/{mine}/records/{record}", headers=reef_app.headers())
        assert owned.status_code == 200, owned.text
    listed = http.get(f"/reef/scenarios/{theirs}/records", headers=reef_app.headers())
    ids = {r["agent_record_id"] for r in listed.json()["records"]}
    assert ids == {world.receipts[theirs], world.reports[theirs]}, ids


def test_a_release_of_one_scenario_is_404_under_another(
    reef_app: EmbeddedApp, http: httpx.Client, cast: Cast, world: World
) -> None:
    theirs = cast.theirs
    foreign = world.creation[cast.mine]
    assert foreign != world.creation[theirs]  # release ids hash their scenario
    before = log_ends(reef_app)
    pinned = http.get(f"/reef/harness?release_id={foreign}", headers=reef_app.headers(theirs))
    assert error_shape_for("/reef")(pinned, 404)["error"]["code"] == "unknown_release"
    for operation in ("rollback", "promote"):
        answered = http.post(
            f"/reef/scenarios/{theirs}/{operation}",
            json={"release_id": foreign},
            headers=reef_app.headers(),
        )
        assert error_shape_for("/reef")(answered, 404)["error"]["code"] == "unknown_release"
    assert log_ends(reef_app) == before


def test_a_bound_token_cannot_tell_whether_another_scenario_exists(
    reef_app: EmbeddedApp, http: httpx.Client, cast: Cast, world: World
) -> None:
    """403 for an existing and for a never-created scenario alike (no existence oracle)."""
    token = cast.only("read")
    for name in (cast.theirs, f"{cast.tag}b-never-created", "unrelated-name"):
        for path, headers in (
            (f"/reef/scenarios/{name}/releases", reef_app.headers(None, token)),
            ("/reef/harness", reef_app.headers(name, token)),
            (f"/reef/reports/{world.reports[cast.theirs]}", reef_app.headers(name, token)),
        ):
            answered = http.get(path, headers=headers)
            body = error_shape_for(path)(answered, 403)
            assert body["error"]["code"] == "scenario_forbidden", (name, path, body)


def test_bound_listings_show_only_their_scenarios(
    reef_app: EmbeddedApp, http: httpx.Client, cast: Cast, world: World
) -> None:
    token = cast.only("read")
    listed = http.get("/reef/scenarios", headers=reef_app.headers(None, token)).json()
    names = {s["scenario"] for s in listed["scenarios"]}
    assert names == {cast.mine}, names
    status = http.get("/reef/status", headers=reef_app.headers(None, token)).json()
    assert set(status["scenarios"]) == {cast.mine}, status
    full = http.get("/reef/status", headers=reef_app.headers()).json()
    assert {cast.mine, cast.theirs} <= set(full["scenarios"]) and "processors" in full
