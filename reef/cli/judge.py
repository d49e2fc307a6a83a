"""``reef judge``: one member of the ``judge`` consumer group, its own process (Kafka)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import click

from reef.artifacts import ClaimCheck, open_store
from reef.cli.options import log_options, pop_log_flags, settings_from
from reef.core.errors import ConfigError
from reef.core.topics import LOG_TOPICS
from reef.crypto.rings import open_keyring
from reef.log import open_log, running
from reef.log.wire_format import open_codec
from reef.services.eventstore import EventStore
from reef.services.judge import Judge, judge_config, running_judge


@click.command("judge")
@log_options
@click.option("--judge-url", help="Base URL of the judge (default: the upstream's).")
@click.option(
    "--judge-dialect",
    type=click.Choice(["openai", "sglang"]),
    help="How the judge is asked: OpenAI chat completions, or SGLang's native /generate.",
)
@click.option("--judge-model", help="Model name the judge requests carry.")
@click.option("--judge-votes", type=int, help="Votes asked per turn (plurality).")
@click.option(
    "--partition",
    "owned",
    type=int,
    multiple=True,
    help="A partition of reef.turns this judge owns (repeat; default: all).",
)
@click.option("--status-every", type=float, default=30.0, help="Seconds between status lines.")
def judge(
    config_file: Path | None, owned: tuple[int, ...], status_every: float, **flags: Any
) -> None:
    """Judge completed agent turns: TurnJudged on reef.judgements, each turn once."""
    settings = settings_from(config_file, **pop_log_flags(flags), **flags).settings
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    producer = settings.deployment.producer_id or f"{socket.gethostname()}-{os.getpid()}"
    try:
        config = judge_config(settings.judge, settings.upstream, producer, owned or None)
    except ConfigError as exc:
        click.echo(f"reef judge: {exc}", err=True)
        sys.exit(2)
    if config is None:
        click.echo("reef judge: no judge endpoint (set judge_url or upstream_url)", err=True)
        sys.exit(2)
    artifacts = open_store(settings)

    async def run() -> None:
        async with running(open_log(settings, client_id="reef-judge")) as log:
            await log.ensure_topics(list(LOG_TOPICS))
            keys = open_keyring(log)  # opens the sealed exchanges; erased ones fail
            await keys.start()
            store = EventStore(
                log,
                open_codec(settings),
                claims=ClaimCheck(artifacts, settings.artifacts.claim_check_bytes),
                keys=keys,
            )
            try:
                async with running_judge(store, config) as worker:
                    await _serve(worker, status_every)
            finally:
                await keys.close()

    asyncio.run(run())


async def _serve(worker: Judge, status_every: float) -> None:
    task = asyncio.create_task(worker.run())
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    reporter = asyncio.create_task(_report(worker, status_every))
    try:
        await task
    except asyncio.CancelledError:
        click.echo("reef judge: stopped", err=True)
    finally:
        reporter.cancel()


async def _report(worker: Judge, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        logging.getLogger("reef.judge").info("status %s", json.dumps(worker.status()))


if __name__ == "__main__":
    judge()
