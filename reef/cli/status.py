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
    """Scenario heads, engines, processor lag, samples pending, turns and judgements."""
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
    _render_turns(body, console)


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
