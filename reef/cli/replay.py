"""``reef replay``: rebuild all state from the topics and print its digests."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click

from reef.catalog import processors
from reef.cli.options import log_options, pop_log_flags, settings_from
from reef.log import open_log, running
from reef.log.wire_format import open_codec
from reef.services.replay import live_digests, replay
from reef.wiring import durable_tables


@click.command("replay")
@log_options
@click.option("--compare-live", is_flag=True, help="Also digest the live processor state.")
def replay_command(config_file: Path | None, compare_live: bool, **flags: Any) -> None:
    """Re-run every processor and projection over the log; print digests as JSON."""
    settings = settings_from(config_file, **pop_log_flags(flags)).settings

    async def run() -> dict[str, Any]:
        async with running(open_log(settings, client_id="reef-replay")) as log:
            result = await replay(processors(settings), log, open_codec(settings))
            out: dict[str, Any] = {"events": result.events, "replayed": result.digests()}
            if compare_live:
                live = await live_digests(processors(settings), log, durable_tables(settings))
                out["live"] = live
                out["equal"] = all(out["replayed"][name] == digest for name, digest in live.items())
            return out

    out = asyncio.run(run())
    click.echo(json.dumps(out, indent=2))
    if compare_live and not out["equal"]:
        raise SystemExit(1)
