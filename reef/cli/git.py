"""``reef git export``: a scenario's release chain as a real Git repository (LFS for weights)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from reef.artifacts import open_store
from reef.artifacts.content import ContentStore
from reef.artifacts.gitview import GitRelease, export_git
from reef.cli.options import log_options, pop_log_flags, settings_from
from reef.log import open_log, running
from reef.log.wire_format import open_codec
from reef.services.eventstore import EventStore
from reef.services.projection import FOLLOWED_TOPICS, ApiState


@click.group("git")
def git() -> None:
    """The Git view of release chains."""


@git.command("export")
@click.argument("scenario")
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--lfs-url", help="LFS endpoint (default: http://<host>:<port>/reef/lfs/<scenario>).")
@log_options
def export(
    scenario: str, dest: Path, lfs_url: str | None, config_file: Path | None, **flags: Any
) -> None:
    """Write SCENARIO's releases, one commit each in chain order, as a bare repo at DEST."""
    settings = settings_from(config_file, **pop_log_flags(flags)).settings
    url = lfs_url or f"http://{settings.api.host}:{settings.api.port}/reef/lfs/{scenario}"

    async def chain() -> ApiState:
        async with running(open_log(settings, client_id="reef-git-export")) as log:
            store = EventStore(log, open_codec(settings))
            state = ApiState()
            for topic in FOLLOWED_TOPICS:
                async for stored in store.read(topic, scenario=scenario):
                    if stored.event is not None:
                        state.apply(stored.event)
            return state

    state = asyncio.run(chain())
    view = state.scenarios.get(scenario)
    if view is None:
        raise click.ClickException(f"unknown scenario {scenario!r}")
    content = ContentStore(open_store(settings))
    releases = [
        GitRelease(
            r.release_id,
            r.parent_release_id,
            r.operation,
            content.load(r.content_id),
            r.metrics,
            r.created_at,
        )
        for r in view.releases
    ]
    exported = export_git(releases, content.store, dest, url, head=view.head)
    click.echo(
        f"exported {len(exported.commits)} release(s) of {scenario} to {exported.path} "
        f"(main = {view.head})"
    )
