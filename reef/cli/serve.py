"""``reef serve``: the API (and, on the embedded log, everything else) in one process."""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

import click
import uvicorn

from reef.cli.options import SERVER_KEEP_ALIVE_S, log_options, pop_log_flags, settings_from
from reef.core.errors import ConfigError
from reef.settings import Settings, describe


@click.command("serve")
@log_options
@click.option("--host", help="Address to bind (default 127.0.0.1).")
@click.option("--port", type=int, help="Port to bind (default 8900).")
@click.option("--workers", type=int, help="API processes sharing the port (default 1).")
@click.option("--upstream-url", help="Provider base URL including /v1.")
@click.option("--upstream-model", help="Model forced on upstream requests.")
@click.option("--upstream-dialect", type=click.Choice(["openai", "anthropic"]))
@click.option("--recipe", help="Recipe new scenarios are bound to (default core).")
@click.option("--max-body-bytes", type=int, help="Largest accepted request body.")
@click.option("--report-rate-per-token", type=float, help="Reports/s per token (unset: no limit).")
@click.option("--report-burst-per-token", type=int, help="Report burst per token (default 20).")
@click.option("--report-rate-per-scenario", type=float, help="Reports/s per scenario.")
@click.option("--report-burst-per-scenario", type=int, help="Report burst per scenario (100).")
@click.option("--insecure", is_flag=True, default=None, help="Allow running with no token.")
@click.option("--print-config", is_flag=True, help="Print every setting and its source, then exit.")
def serve(config_file: Path | None, print_config: bool, **flags: Any) -> None:
    """Serve the OpenAI/Anthropic-compatible API, recording every exchange."""
    loaded = settings_from(config_file, **pop_log_flags(flags), **flags)
    if print_config:
        for name, value, source in describe(loaded):
            click.echo(f"{name:28} {value:40} ({source})")
        return
    settings = loaded.settings
    if config_file is not None and settings.deployment.recipe_config is None:
        # the deployment file's `recipe:` section configures its recipe too
        settings = settings.replace(recipe_config=config_file)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from reef.wiring import create_app

    try:  # with --workers too: a configuration every worker would refuse stops here
        app = create_app(settings)
    except ConfigError as exc:
        click.echo(f"reef serve: {exc}", err=True)
        sys.exit(2)
    if settings.api.workers > 1:
        from reef.cli.serve_workers import supervise

        sys.exit(supervise(settings))
    if (
        settings.auth.insecure
        and settings.auth.token is None
        and not settings.auth.tokens.get_secret_value()
    ):
        click.echo("WARNING: running with --insecure: no authentication on any route", err=True)
    config = uvicorn.Config(
        app,
        host=settings.api.host,
        port=settings.api.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
        timeout_keep_alive=SERVER_KEEP_ALIVE_S,
    )
    sockets = None
    if settings.api.reuse_port:  # one of `reef serve --workers` (reef/cli/serve_workers.py)
        from reef.cli.serve_workers import reuse_port_socket

        sockets = [reuse_port_socket(settings.api.host, settings.api.port)]
    else:
        click.echo(
            f"reef serve: {settings.deployment.log} log, listening on http://{settings.api.host}:{settings.api.port}",
            err=True,
        )
        notice = no_upstream_notice(settings)
        if notice is not None:
            click.echo(notice, err=True)
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
    if not server.started:  # as uvicorn.run: the app did not start
        sys.exit(3)


def no_upstream_notice(settings: Settings) -> str | None:
    """What a first ``reef serve`` with no upstream serves, and what to do instead."""
    if settings.upstream.url is not None:
        return None
    model = settings.engine.model
    served = (
        "the built-in tiny model (untrained: gibberish until a recipe trains it)"
        if model == "tiny"
        else f"the model {model!r}"
    )
    return (
        f"reef serve: no upstream is configured, so a local engine serves {served}.\n"
        "  To serve a provider, set its URL: --upstream-url https://api.openai.com/v1 "
        "(or REEF_UPSTREAM_URL, or `upstream: {url: ...}` in the -c file; the key in "
        "REEF_UPSTREAM_API_KEY).\n"
        "  To watch the tiny model learn from reports, run `reef demo`."
    )
