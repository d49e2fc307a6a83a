"""``reef engine``: serve a model with SGLang's HTTP API (no SGLang, no GPU needed).

Importing this module is cheap and torch-free (``reef --help`` imports it); the model,
torch and the app are imported when the command runs.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from reef.cli.options import SERVER_KEEP_ALIVE_S
from reef.engine.config import EngineConfig


@click.command("engine")
@click.option(
    "--model",
    "model",
    default="tiny",
    show_default=True,
    help="A Hugging Face model folder, or a built-in model: tiny, tiny-100m.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=30000, show_default=True, type=int)
@click.option(
    "--weight-version",
    default="default",
    show_default=True,
    help="The weight version reported until an update names another.",
)
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option(
    "--served-model-name", default=None, help="Model id of /v1/models (default: --model)."
)
@click.option(
    "--max-concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(1),
    help="Generations running at once.",
)
@click.option(
    "--group-timeout",
    "group_timeout_s",
    default=300.0,
    show_default=True,
    type=float,
    help="Seconds a weight-update group rendezvous or broadcast may block.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
def engine(
    *,
    model: str,
    host: str,
    port: int,
    weight_version: str,
    device: str,
    served_model_name: str | None,
    max_concurrency: int,
    group_timeout_s: float,
    log_level: str,
) -> None:
    """Serve a model over SGLang's native API and OpenAI chat completions.

    \b
    reef engine --model tiny --port 30000
    curl localhost:30000/get_model_info
    """
    run(
        EngineConfig(
            model=model,
            host=host,
            port=port,
            weight_version=weight_version,
            device=device,
            served_model_name=served_model_name,
            max_concurrency=max_concurrency,
            group_timeout_s=group_timeout_s,
            log_level=log_level,
        )
    )


def run(config: EngineConfig) -> None:
    """Serve ``config`` with uvicorn (one worker) until interrupted; a model it cannot
    load (no such folder, no chat template, a tokenizer that does not fit the weights)
    stops it before it listens, with one line and exit status 2."""
    import uvicorn
    from transformers.utils import logging as transformers_logging

    from reef.engine.errors import EngineError
    from reef.engine.loader import load_engine_model
    from reef.engine.server import create_app

    disable: Any = transformers_logging.disable_progress_bar
    disable()
    try:
        model = load_engine_model(
            config.model, device=config.device, weight_version=config.weight_version
        )
    except EngineError as exc:
        click.echo(f"reef engine: {exc}", err=True)
        sys.exit(2)
    uvicorn.run(
        create_app(config, model),
        host=config.host,
        port=config.port,
        workers=1,
        log_level=config.log_level,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=SERVER_KEEP_ALIVE_S,
    )


if __name__ == "__main__":
    engine()
