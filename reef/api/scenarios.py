"""Scenario, release-chain and raw-history reads, and explicit scenario creation."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from reef.api import openapi, registry
from reef.api.auth import Principal
from reef.api.context import authorised, context_of
from reef.api.inputs import checked_scenario, parse_object, read_body
from reef.core import topics
from reef.core.erasure import session_receipts, tracked_receipts
from reef.core.errors import RequestError
from reef.core.events import InferenceRecorded, RecordErased, ReportSubmitted
from reef.log.partitioner import partition_for
from reef.services.eventstore import StoredEvent

router = APIRouter()

NO_STORE = {"cache-control": "no-store"}


@router.get("/reef/scenarios", responses=openapi.errors(401, 403))
async def list_scenarios(request: Request) -> JSONResponse:
    """Every scenario with its recipe and head release.

    curl -H "Authorization: Bearer $REEF_TOKEN" http://127.0.0.1:8900/reef/scenarios
    """
    ctx = context_of(request)
    principal = ctx.authenticate(request, "read")
    views = sorted(ctx.projection.state.scenarios.values(), key=lambda v: v.name)
    return JSONResponse({"scenarios": [v.as_json() for v in views if principal.may_use(v.name)]})


@router.post(
    "/reef/scenarios",
    responses={
        201: {"description": "Created"},
        **openapi.errors(400, 401, 403, 404, 409, 413, 503),
    },
    openapi_extra=openapi.declare(body=openapi.CREATE_SCENARIO_BODY),
)
async def create_scenario(request: Request) -> JSONResponse:
    """Create a scenario bound to this deployment's recipe: 201 created, 200 existed.

    curl -H "Authorization: Bearer $REEF_TOKEN" -d '{"name": "demo"}' \\
      http://127.0.0.1:8900/reef/scenarios
    """
    ctx = context_of(request)
    principal = ctx.authenticate(request, "admin")
    body = parse_object(await read_body(request, ctx.settings.api.max_body_bytes))
    name = body.get("name")
    if not isinstance(name, str):
        raise RequestError(400, "invalid_name", "name must be a string")
    name = checked_scenario(name)
    principal.require_scenario(name)
    wanted = body.get("release_id")
    if wanted is not None and not isinstance(wanted, str):
        raise RequestError(400, "invalid_release_id", "release_id must be a string")
    existing = ctx.projection.state.scenarios.get(name)
    if existing is None and wanted is not None:
        raise RequestError(404, "unknown_release", f"release {wanted!r} does not exist")
    view, created = await registry.ensure(ctx, name, implicit=False)
    if wanted is not None and wanted != view.releases[0].release_id:
        raise RequestError(409, "conflict", f"scenario {name!r} starts from another release")
    return JSONResponse(view.as_json(), status_code=201 if created else 200)


@router.get("/reef/scenarios/{scenario}/releases", responses=openapi.errors(400, 401, 403, 404))
async def list_releases(scenario: str, request: Request) -> JSONResponse:
    """The scenario's release chain, newest first.

    curl -H "Authorization: Bearer $REEF_TOKEN" \\
      http://127.0.0.1:8900/reef/scenarios/demo/releases
    """
    ctx = context_of(request)
    ctx.authenticate(request, "read").require_scenario(checked_scenario(scenario))
    view = registry.find(ctx, scenario)
    releases = [r.as_json(view.head) for r in reversed(view.releases)]
    return JSONResponse({"scenario": view.name, "releases": releases})


@router.get("/reef/scenarios/{scenario}/records", responses=openapi.errors(400, 401, 403, 404, 503))
async def list_records(
    scenario: str,
    request: Request,
    principal: Annotated[Principal, Depends(authorised("read"))],  # 401/403 before 400
    after: str = Query("-1.-1", pattern=r"^-?\d{1,18}(\.-?\d{1,18})?$"),
    limit: int = Query(50, ge=1, le=500),
) -> JSONResponse:
    """Exchanges and reports in time order; ``next_after`` is the cursor of the next page.

    The cursor is ``<inference offset>.<report offset>``: the last offset already seen in
    the scenario's partition of ``reef.inference`` and of ``reef.reports`` (a plain
    ``<n>`` means ``<n>.-1``).

    curl -H "Authorization: Bearer $REEF_TOKEN" \\
      "http://127.0.0.1:8900/reef/scenarios/demo/records?after=-1.-1&limit=50"
    """
    ctx = context_of(request)
    principal.require_scenario(checked_scenario(scenario))
    registry.find(ctx, scenario)
    seen_inference, _, seen_reports = after.partition(".")
    cursor = {topics.INFERENCE: int(seen_inference), topics.REPORTS: int(seen_reports or -1)}
    found: list[StoredEvent] = []
    for topic, last in cursor.items():  # the first `limit` of the merge come from these
        taken = 0
        async for stored in _scenario_events(request, topic, scenario, last + 1):
            found.append(stored)
            taken += 1
            if taken >= limit:
                break
    found.sort(key=lambda e: (e.record.timestamp_ms, e.record.topic, e.record.offset))
    page = found[:limit]
    for stored in page:
        cursor[stored.record.topic] = stored.record.offset
    return JSONResponse(
        {
            "scenario": scenario,
            "partition": partition_for(scenario.encode(), ctx.store.log.partitions),
            "records": [record_json(stored) for stored in page],
            "next_after": f"{cursor[topics.INFERENCE]}.{cursor[topics.REPORTS]}",
        },
        headers=NO_STORE,
    )


@router.get(
    "/reef/scenarios/{scenario}/records/{record_id}",
    responses=openapi.errors(400, 401, 403, 404, 503),
)
async def get_record(scenario: str, record_id: str, request: Request) -> JSONResponse:
    """One record (an exchange or a report) by id.

    curl -H "Authorization: Bearer $REEF_TOKEN" \\
      http://127.0.0.1:8900/reef/scenarios/demo/records/<id>
    """
    ctx = context_of(request)
    ctx.authenticate(request, "read").require_scenario(checked_scenario(scenario))
    registry.find(ctx, scenario)
    for topic in (topics.INFERENCE, topics.REPORTS):
        async for stored in _scenario_events(request, topic, scenario, 0, raw=True):
            if stored.event is not None and stored.event.event_id == record_id:
                readable = await ctx.store.open(stored)  # sealed bodies, or erased
                return JSONResponse(record_json(readable), headers=NO_STORE)
    raise RequestError(404, "unknown_record", f"no record {record_id!r} in scenario {scenario!r}")


@router.delete(
    "/reef/scenarios/{scenario}/records/{record_id}",
    responses=openapi.errors(400, 401, 403, 404, 409, 503),
)
async def erase_record(scenario: str, record_id: str, request: Request) -> JSONResponse:
    """Erase an exchange (admin): its content becomes unreadable everywhere.

    Destroys the record's data key (a tombstone on the key topic) and appends
    RecordErased; answers once both are durable. Erasing again answers 200 with
    ``already_erased`` (and writes the tombstone again). A report is not erasable (409).
    A served exchange's shadow copy (``shadow_of``: reef.core.shadow) is erased with it,
    after it (a retry finishes a copy a crash left); a copy is also erasable by its id.

    curl -X DELETE -H "Authorization: Bearer $REEF_TOKEN" \\
      http://127.0.0.1:8900/reef/scenarios/demo/records/<id>
    """
    ctx = context_of(request)
    principal = ctx.authenticate(request, "admin")
    principal.require_scenario(checked_scenario(scenario))
    registry.find(ctx, scenario)
    record: InferenceRecorded | None = None
    shadows: set[str] = set()  # the sealed shadow copies of the record
    erased: set[str] = set()
    async for stored in _scenario_events(request, topics.INFERENCE, scenario, 0, raw=True):
        event = stored.event
        if isinstance(event, InferenceRecorded) and event.event_id == record_id:
            record = event
        elif isinstance(event, InferenceRecorded) and event.shadow_of == record_id:
            if event.sealed:
                shadows.add(event.event_id)
        elif isinstance(event, RecordErased):
            erased.add(event.record_id)
    if record is None:
        async for stored in _scenario_events(request, topics.REPORTS, scenario, 0, raw=True):
            if stored.event is not None and stored.event.event_id == record_id:
                raise RequestError(
                    409, "not_erasable", "a report is not erasable; erase the exchanges it quotes"
                )
        raise RequestError(
            404, "unknown_record", f"no record {record_id!r} in scenario {scenario!r}"
        )
    if not record.sealed:
        raise RequestError(
            409, "not_erasable", "recorded before bodies were sealed: its bytes cannot be erased"
        )
    for erasing in [record_id, *sorted(shadows - erased)]:
        await ctx.store.erase(
            scenario,
            erasing,
            producer=ctx.producer,
            requested_by=principal.name,
            announce=erasing not in erased,
        )
    body = {"agent_record_id": record_id, "scenario": scenario, "erased": True}
    extra = {"already_erased": record_id in erased, "shadows_erased": sorted(shadows)}
    return JSONResponse(body | extra, headers=NO_STORE)


@router.delete(
    "/reef/scenarios/{scenario}/sessions/{session_id}",
    responses=openapi.errors(400, 401, 403, 404, 503),
)
async def erase_session(scenario: str, session_id: str, request: Request) -> JSONResponse:
    """Erase an agent session (admin): every exchange of it, as ``DELETE .../records/<id>``
    erases one, with their shadow copies (:mod:`reef.core.erasure` says which).

    The session is its tag (``x-reef-tag-session``) or, when sessions are tracked, its id
    on ``reef.turns``. Answers once every key is destroyed; ``erased`` lists the receipts
    erased now, ``already_erased`` the others; exchanges recorded before bodies were
    sealed cannot be erased (``not_erasable``). No exchange of that session: 404.

    curl -X DELETE -H "Authorization: Bearer $REEF_TOKEN" \\
      http://127.0.0.1:8900/reef/scenarios/demo/sessions/<session>
    """
    ctx = context_of(request)
    principal = ctx.authenticate(request, "admin")
    principal.require_scenario(checked_scenario(scenario))
    registry.find(ctx, scenario)
    turns = [s.event async for s in _scenario_events(request, topics.TURNS, scenario, 0, raw=True)]
    tracked = tracked_receipts(session_id, (e for e in turns if e is not None))
    exchanges: dict[str, InferenceRecorded] = {}
    erased: set[str] = set()
    async for stored in _scenario_events(request, topics.INFERENCE, scenario, 0, raw=True):
        if isinstance(stored.event, InferenceRecorded):
            exchanges[stored.event.event_id] = stored.event
        elif isinstance(stored.event, RecordErased):
            erased.add(stored.event.record_id)
    members = session_receipts(session_id, exchanges.values(), tracked)
    if not members:
        raise RequestError(
            404, "unknown_session", f"no exchange of session {session_id!r} in {scenario!r}"
        )
    sealed = [r for r in members if exchanges[r].sealed]
    for receipt in sealed:
        await ctx.store.erase(
            scenario,
            receipt,
            producer=ctx.producer,
            requested_by=principal.name,
            announce=receipt not in erased,
        )
    body = {
        "scenario": scenario,
        "session": session_id,
        "erased": [r for r in sealed if r not in erased],
        "already_erased": [r for r in sealed if r in erased],
        "not_erasable": [r for r in members if not exchanges[r].sealed],
    }
    return JSONResponse(body, headers=NO_STORE)


async def _scenario_events(  # type: ignore[no-untyped-def]
    request: Request, topic: str, scenario: str, start: int, *, raw: bool = False
):
    """The scenario's events of a topic from ``start``, without erasure announcements."""
    ctx = context_of(request)
    partition = partition_for(scenario.encode(), ctx.store.log.partitions)
    async for stored in ctx.store.read(topic, start={partition: start}, scenario=scenario, raw=raw):
        if stored.record.partition != partition or stored.event is None:
            continue
        if isinstance(stored.event, RecordErased) and not raw:
            continue
        yield stored


def record_json(stored: StoredEvent) -> dict[str, Any]:
    event = stored.event
    base: dict[str, Any] = {"offset": stored.record.offset}
    if isinstance(event, InferenceRecorded) and stored.erased:
        # erased: that it existed stays, nothing of what it said
        return base | {
            "agent_record_id": event.event_id,
            "request_type": "inference",
            "created_at": event.occurred_at.isoformat(),
            "erased": True,
        }
    if isinstance(event, InferenceRecorded):
        return base | {
            "agent_record_id": event.event_id,
            "request_type": "inference",
            "created_at": event.occurred_at.isoformat(),
            "release_id": event.release_id,
            "route": event.route,
            "dialect": event.dialect,
            "status": event.status,
            "complete": event.complete,
            "stream": event.stream,
            "error": event.error,
            "request": _json_or_text(event.request_json),
            "response": _json_or_text(event.response_json),
            "tags": event.tags,
            "usage": {"input_tokens": event.input_tokens, "output_tokens": event.output_tokens},
            # blocks it repeats from an erased record read as {"erased": true}
            **({"partly_erased": True} if stored.partly_erased else {}),
        }
    if isinstance(event, ReportSubmitted):
        return base | {
            "agent_record_id": event.event_id,
            "request_type": "report",
            "created_at": event.occurred_at.isoformat(),
            "score": event.score,
            "feedback": json.loads(event.feedback_json),
            "references": event.references,
            "metadata": json.loads(event.metadata_json),
        }
    return base


def _json_or_text(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
