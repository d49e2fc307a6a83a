"""``reef status``: GET /reef/status rendered in the terminal."""

from __future__ import annotations

import os
from typing import Any

import click
import httpx
from rich.console import Console
from rich.table import Table


@click.command("status")
@click.option("--url", default="http://127.0.0.1:8900", show_default=True, help="Reef API.")
@click.option("--token", envvar="REEF_TOKEN", help="Bearer token (default: $REEF_TOKEN).")
def status(url: str, token: str | None) -> None:
    """Scenario heads, engines, rollouts, processor lag, samples pending, turns and judgements."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(f"{url.rstrip('/')}/reef/status", headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach {url}: {exc}") from exc
    if response.status_code != 200:
        raise click.ClickException(f"{response.status_code}: {response.text}")
    render(response.json(), Console(width=int(os.environ.get("COLUMNS", "120"))))


def render(body: dict[str, Any], console: Console) -> None:
    console.print(
        f"[bold]Reef[/bold] {body['producer']} on the {body['log']} log; "
        f"samples pending: {body.get('samples_pending', 0)}"
    )
    scenarios = Table("scenario", "recipe", "head release", "releases", "engines")
    for name, info in body["scenarios"].items():
        engines = ", ".join(f"{e}→{v['release_id'][:12]}" for e, v in info["engines"].items())
        scenarios.add_row(
            name,
            info["recipe"],
            info["head_release_id"][:16],
            str(info["releases"]),
            engines or "-",
        )
    console.print(scenarios)
    lag = Table("processor", "host", "input", "lag")
    for name, info in body["processors"].items():
        for topic, value in info["lag"].items():
            lag.add_row(name, info.get("host", ""), topic, str(value))
    console.print(lag)
    _render_rollouts(body, console)
    _render_turns(body, console)
    _render_spend(body, console)


def _render_rollouts(body: dict[str, Any], console: Console) -> None:
    """Each scenario's latest rollout: share, exchanges and mean score per arm, the
    statistic (shown only where a scenario had a rollout)."""
    found = {n: info["rollout"] for n, info in body["scenarios"].items() if "rollout" in info}
    if not found:
        return
    table = Table(
        "scenario", "rollout", "candidate", "share", "status", "exchanges h/c", "score h/c", "p"
    )
    for name, rollout in found.items():
        figures = rollout.get("figures") or {}
        head, candidate = figures.get("head", {}), figures.get("candidate", {})
        status = rollout["status"] + (f" ({rollout['reason']})" if rollout["reason"] else "")
        table.add_row(
            name,
            rollout["rollout_id"][:12],
            rollout["candidate_release_id"][:12],
            f"{rollout['share']:g}",
            status,
            f"{head.get('exchanges', 0)}/{candidate.get('exchanges', 0)}",
            f"{_score(head)}/{_score(candidate)}",
            f"better {_p(figures, 'p_better')}, worse {_p(figures, 'p_worse')}",
        )
    console.print(table)


def _score(arm: dict[str, Any]) -> str:
    mean = arm.get("mean_score")
    return "-" if mean is None else f"{mean:.3f}"


def _p(figures: dict[str, Any], name: str) -> str:
    value = figures.get(name)
    return "-" if value is None else f"{value:.3g}"


def _render_turns(body: dict[str, Any], console: Console) -> None:
    """Sessions and judgements per scenario (shown only while sessions are tracked)."""
    tracked = {name: info["turns"] for name, info in body["scenarios"].items() if "turns" in info}
    if not tracked:
        return
    turns = Table("scenario", "turns completed", "sessions expired", "judged +1/-1/0", "failed")
    for name, figures in tracked.items():
        judged = figures["turns_judged"]
        turns.add_row(
            name,
            str(figures["turns_completed"]),
            str(figures["sessions_expired"]),
            f"{judged['+1']}/{judged['-1']}/{judged['0']}",
            str(figures["judgements_failed"]),
        )
    console.print(turns)
    judge = body.get("judge")
    if judge is not None:
        error = f"; last error: {judge['error']}" if judge.get("error") else ""
        console.print(
            f"judge (in process): {judge.get('in_flight', 0)} in flight, "
            f"{judge.get('judged', 0)} judged, {judge.get('failed', 0)} failed{error}"
        )


def _render_spend(body: dict[str, Any], console: Console) -> None:
    """Tokens and cost per scenario and serving release (shown only with a price table)."""
    found = {name: info["spend"] for name, info in body["scenarios"].items() if "spend" in info}
    if not found:
        return
    table = Table(
        "scenario", "release", "priced/exchanges", "input", "cache read", "cache write",
        "output", "cost USD",
    )  # fmt: skip
    for name, spend in found.items():
        for release, figures in spend["releases"].items():
            table.add_row(name, release[:16], *_spend_cells(figures))
        if len(spend["releases"]) > 1:
            table.add_row(name, "all", *_spend_cells(spend))
    console.print(table)


def _spend_cells(figures: dict[str, Any]) -> list[str]:
    return [
        f"{figures['priced']}/{figures['exchanges']}",
        str(figures["uncached_input_tokens"]),
        str(figures["cache_read_tokens"]),
        str(figures["cache_write_tokens"]),
        str(figures["output_tokens"]),
        f"{figures['cost_usd']:.6f}",
    ]
