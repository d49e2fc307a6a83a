"""``reef streams``: the stream processors' host (exactly-once on Kafka; embedded runtime)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

import click

from reef.cli.options import log_options, pop_log_flags, settings_from


@click.command("streams")
@log_options
@click.option("--loglevel", default="info", help="Worker log level.")
@click.option("--instance-id", help="Static membership id (stable per worker: fast restarts).")
def streams(config_file: Path | None, loglevel: str, instance_id: str | None, **flags: Any) -> None:
    """Run the join and release-chain processors: an exactly-once worker on Kafka, the
    embedded runtime on the embedded log (``reef serve`` starts that one itself)."""
    settings = settings_from(
        config_file, **pop_log_flags(flags), streams_instance_id=instance_id
    ).settings
    logging.basicConfig(
        level=loglevel.upper(),
        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s",
    )
    if settings.deployment.log == "embedded":
        from reef.hosts.worker import run_embedded_processors

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run_embedded_processors(settings))
        return
    from streams.datadir import worker_data_dir
    from streams.host import data_dir_base, serve

    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    with worker_data_dir(data_dir_base(settings)) as data_dir:
        asyncio.run(serve(settings, data_dir))
