"""``reef streams``: a Faust worker hosting the stream processors on Kafka."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from reef.options import log_options, pop_log_flags, settings_from


@click.command("streams")
@log_options
@click.option("--loglevel", default="info", help="Faust worker log level.")
@click.option("--instance-id", help="Static membership id (stable per worker: fast restarts).")
def streams(config_file: Path | None, loglevel: str, instance_id: str | None, **flags: Any) -> None:
    """Run the join and release-chain processors: a Faust worker (exactly-once) on Kafka,
    the embedded runtime on the embedded log (``reef serve`` starts that one itself)."""
    settings = settings_from(
        config_file, **pop_log_flags(flags), streams_instance_id=instance_id
    ).settings
    if settings.log == "embedded":
        import contextlib

        from reef.processors.worker import run_embedded_processors

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run_embedded_processors(settings))
        return
    from faust import Worker

    from streams.app import create_app, data_dir_base, ensure_changelog_topics
    from streams.datadir import worker_data_dir

    with worker_data_dir(data_dir_base(settings)) as data_dir:
        app = create_app(settings, data_dir)
        setup = asyncio.new_event_loop()  # not made current: Faust's worker owns that one
        try:
            setup.run_until_complete(ensure_changelog_topics(settings, app))
        finally:
            setup.close()
        Worker(app, loglevel=loglevel, quiet=True).execute_from_commandline()
