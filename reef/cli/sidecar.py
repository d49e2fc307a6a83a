"""``reef sidecar``: keep one engine on its scenario's head release."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path
from typing import Any

import click

from reef.artifacts import open_store
from reef.artifacts.content import ContentStore
from reef.cli.options import log_options, pop_log_flags, settings_from
from reef.engine.engine_client import AsyncEngineClient
from reef.log import open_log, running
from reef.log.wire_format import open_codec
from reef.services.eventstore import EventStore
from reef.sidecar.runner import Sidecar, SidecarConfig


@click.command("sidecar")
@click.option(
    "--engine", "engine_url", required=True, help="Engine base URL (SGLang or reef engine)."
)
@click.option("--scenario", required=True, help="Scenario whose releases the engine serves.")
@click.option("--engine-id", help="Name of the engine in events (default: host:port of --engine).")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Materialised releases.")
@log_options
def sidecar(
    engine_url: str,
    scenario: str,
    engine_id: str | None,
    cache_dir: Path | None,
    config_file: Path | None,
    **flags: Any,
) -> None:
    """Follow reef.releases and hot-load every committed release into the engine."""
    settings = settings_from(config_file, **pop_log_flags(flags)).settings
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    config = SidecarConfig(
        engine_id=engine_id or engine_url.split("://")[-1].rstrip("/"),
        scenario=scenario,
        cache_dir=cache_dir or settings.deployment.state_dir / "engine-cache",
        producer=f"sidecar-{socket.gethostname()}-{os.getpid()}",
        load_method=settings.engine.load_method,
        push_wait_s=settings.engine.push_wait_s,
    )

    async def run() -> None:
        engine = AsyncEngineClient(engine_url)
        try:
            async with running(open_log(settings, client_id="reef-sidecar")) as log:
                content = ContentStore(open_store(settings))
                store = EventStore(log, open_codec(settings))
                await Sidecar(config, store, content, engine).run()
        finally:
            await engine.aclose()

    asyncio.run(run())
