"""``reef audit verify`` and ``reef audit trail``: check and explain the history."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from reef.artifacts import ClaimCheck, open_store
from reef.artifacts.content import ContentStore
from reef.cli.options import log_options, pop_log_flags, settings_from
from reef.core import topics
from reef.core.events import Event, InferenceRecorded
from reef.core.rollouts import Rollout
from reef.log import open_log, running
from reef.log.wire_format import open_codec
from reef.services import audit
from reef.settings import Settings
from reef.wiring import readable_store


async def _events(settings: Settings, topic_names: tuple[str, ...]) -> list[Event]:
    """The topics' events, readable: sealed bodies opened, erased ones without content."""
    claims = ClaimCheck(open_store(settings), settings.artifacts.claim_check_bytes)
    async with (
        running(open_log(settings, client_id="reef-audit")) as log,
        readable_store(log, claims, open_codec(settings)) as store,
    ):
        out: list[Event] = []
        for topic in topic_names:
            async for stored in store.read(topic):
                if stored.event is not None:
                    out.append(stored.event)
        return out


@click.group("audit")
def audit_group() -> None:
    """Verify the release chain, artifacts and samples; trace a receipt."""


@audit_group.command("verify")
@click.option("--shallow", is_flag=True, help="Check objects exist, without re-hashing them.")
@log_options
def verify(shallow: bool, config_file: Path | None, **flags: Any) -> None:
    """Exit 0 only if every release hash, parent link, artifact and sample reference holds."""
    settings = settings_from(config_file, **pop_log_flags(flags)).settings
    events = asyncio.run(
        _events(settings, (topics.SCENARIOS, topics.RELEASES, topics.INFERENCE, topics.SAMPLES))
    )
    report = audit.AuditReport()
    commits = audit.verify_chain(events, report)
    audit.verify_content(commits, ContentStore(open_store(settings)), report, deep=not shallow)
    audit.verify_samples(events, report)
    for problem in report.problems:
        click.echo(f"FAIL {problem}")
    click.echo(
        f"{report.releases} release(s), {report.objects} artifact object(s), "
        f"{report.samples} sample(s): "
        + ("OK" if report.ok else f"{len(report.problems)} problem(s)")
    )
    if not report.ok:
        raise SystemExit(1)


@audit_group.command("trail")
@click.argument("receipt")
@log_options
def trail(receipt: str, config_file: Path | None, **flags: Any) -> None:
    """The record, its reports, sample, release, engines and rollout arm; turn, judgement."""
    settings = settings_from(config_file, **pop_log_flags(flags)).settings
    found = audit.trail(receipt, asyncio.run(_events(settings, topics.ALL_TOPICS)))
    if found.record is None:
        raise click.ClickException(f"no recorded exchange {receipt}")
    record = _json(found.record)
    if found.erased is not None:
        # the content is gone; what stays is that it existed and where it went
        record = {k: v for k, v in record.items() if k not in audit.CONTENT_FIELDS}
        record["erased"] = _json(found.erased)
    body = {
        "record": record,
        "reports": [_json(e) for e in found.reports],
        "samples": [_json(e) for e in found.samples],
        "releases": [_json(e) for e in found.releases],
        "engines": [_json(e) for e in found.engines],
        **({"turn": _turn(found, turn)} if (turn := found.turn) is not None else {}),
        **({"rollout": _rollout(found.rollout, found.arm)} if found.rollout else {}),
        **({"shadow": _shadow(found.shadow)} if found.shadow else {}),
    }
    click.echo(json.dumps(body, indent=2))


def _rollout(rollout: Rollout, arm: str | None) -> dict[str, Any]:
    """The rollout live when the exchange was recorded, and the arm that served it."""
    return {
        "rollout_id": rollout.rollout_id,
        "arm": arm,
        "candidate_release_id": rollout.candidate_release_id,
        "head_release_id": rollout.head_release_id,
        "mode": rollout.policy.mode,
        "share": rollout.policy.share,
        "status": rollout.status,
        "reason": rollout.reason,
    }


def _shadow(copy: InferenceRecorded) -> dict[str, Any]:
    """The shadow copy of the exchange: who answered it and how (its own trail has more)."""
    return {
        "receipt": copy.event_id,
        "release_id": copy.release_id,
        "status": copy.status,
        "complete": copy.complete,
        "error": copy.error,
        "latency_ms": copy.latency_ms,
    }


def _turn(found: audit.Trail, turn: tuple[str, int]) -> dict[str, Any]:
    """The exchange as a turn: its session and index, what completed it (the next state's
    role and receipt), whether its session expired on it, and its judgement."""
    session_id, index = turn
    completed = found.completed
    judgement = found.judgement
    return {
        "session_id": session_id,
        "turn_index": index,
        "completes_receipt_id": found.completes.receipt_id if found.completes else None,
        "completed": None
        if completed is None
        else {
            "event_id": completed.event_id,
            "occurred_at": completed.occurred_at.isoformat(),
            "next_receipt_id": completed.next_receipt_id,
            "next_state_role": completed.next_state_role,
            "matched_by": completed.matched_by,
        },
        "expired": None if found.expired is None else _json(found.expired),
        "judgement": None
        if judgement is None
        else {
            "event_id": judgement.event_id,
            "occurred_at": judgement.occurred_at.isoformat(),
            "judge_model": judgement.judge_model,
            "score": judgement.score,
            "votes": judgement.votes,
            "invalid_votes": judgement.invalid_votes,
            "failed_reason": judgement.failed_reason,
            "hints": len(judgement.hints),
        },
    }


def _json(event: Event) -> dict[str, Any]:
    body = asdict(event)
    body["type"] = event.type_name()
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in body.items()}
