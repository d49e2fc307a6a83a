"""``reef trainer``: one member of the ``trainer:<recipe>`` consumer group, its own process."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import click

from reef.artifacts import ClaimCheck, open_store
from reef.artifacts.content import ContentStore
from reef.cli.options import log_options, pop_log_flags, settings_from
from reef.core.errors import ConfigError
from reef.core.topics import LOG_TOPICS
from reef.crypto.rings import open_keyring
from reef.log import open_log, running
from reef.log.wire_format import open_codec
from reef.services.eventstore import EventStore


@click.command("trainer")
@log_options
@click.option("--recipe", help="Recipe to train (default: the deployment's recipe setting).")
@click.option(
    "--recipe-config",
    type=click.Path(path_type=Path, exists=True),
    help="YAML file whose 'recipe:' section configures the recipe (default: the -c file).",
)
@click.option(
    "--partition",
    "owned",
    type=int,
    multiple=True,
    help="A partition of reef.samples this trainer owns (repeat; default: all).",
)
@click.option("--status-every", type=float, default=30.0, help="Seconds between status lines.")
def trainer(
    config_file: Path | None,
    owned: tuple[int, ...],
    status_every: float,
    **flags: Any,
) -> None:
    """Train candidates from joined samples, gate them and propose releases."""
    from recipes.registry import recipe_from_settings
    from trainers.runner import build_trainer

    settings = settings_from(config_file, **pop_log_flags(flags), **flags).settings
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:  # a recipe it cannot read stops the trainer before it touches the log
        recipe = recipe_from_settings(settings, config_file)
    except ConfigError as exc:
        click.echo(f"reef trainer: {exc}", err=True)
        sys.exit(2)
    content = ContentStore(open_store(settings))

    async def run() -> None:
        async with running(open_log(settings, client_id="reef-trainer")) as log:
            await log.ensure_topics(list(LOG_TOPICS))
            claims = ClaimCheck(content.store, settings.artifacts.claim_check_bytes)
            keys = open_keyring(log)  # opens sealed samples; erased ones are skipped
            await keys.start()
            worker = build_trainer(
                settings,
                EventStore(log, open_codec(settings), claims=claims, keys=keys),
                content,
                recipe=recipe,
                partitions=owned or None,
            )
            if not worker.recipe.trains:
                click.echo(
                    f"reef trainer: recipe {settings.deployment.recipe} never trains", err=True
                )
                return
            task = asyncio.create_task(worker.run())
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
            reporter = asyncio.create_task(_report(worker.status, status_every))
            try:
                await task
            except asyncio.CancelledError:
                click.echo("reef trainer: stopped", err=True)
            finally:
                reporter.cancel()
                await keys.close()

    try:
        asyncio.run(run())
    except ConfigError as exc:
        click.echo(f"reef trainer: {exc}", err=True)
        sys.exit(2)


async def _report(status: Any, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        body = status()
        body.pop("steps", None)
        logging.getLogger("reef.trainer").info("status %s", json.dumps(body, sort_keys=True))


if __name__ == "__main__":
    trainer()
