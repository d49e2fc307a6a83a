"""``reef engine``: serve a model with SGLang's HTTP API (no SGLang, no GPU needed).

Importing this module is cheap and torch-free (``reef --help`` imports it); the model,
torch and the app are imported when the command runs. ``--backend sglang`` runs SGLang
itself instead, where it is installed (:mod:`reef.engine.sglang_launch`).
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

import click

from reef.cli.options import SERVER_KEEP_ALIVE_S
from reef.engine.config import EngineConfig
from reef.engine.sampling_defaults import SAMPLING_DEFAULTS_SOURCES, SamplingDefaultsSource
from reef.engine.tool_parsers import PARSERS


@click.command("engine")
@click.option(
    "--backend",
    type=click.Choice(["reef", "sglang"]),
    default="reef",
    show_default=True,
    help="reef: Reef's own engine; sglang: run python -m sglang.launch_server (needs "
    "SGLang installed and a GPU) and wait until it serves.",
)
@click.option(
    "--sglang-args",
    default="",
    help="--backend sglang: further launch_server flags, one string "
    '(e.g. "--tp-size 2 --enable-lora"); the other options below --port are Reef\'s only, '
    "but for --sampling-defaults, which SGLang is given too.",
)
@click.option(
    "--ready-timeout",
    "ready_timeout_s",
    default=900.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="--backend sglang: seconds to wait for /health and /get_model_info.",
)
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
    "--tool-call-parser",
    default=None,
    type=click.Choice(sorted(PARSERS)),
    help="How tool calls are read from the model's output (SGLang's flag; default: "
    "pythonic for the built-in models, no parsing for a folder).",
)
@click.option(
    "--sampling-defaults",
    default="model",
    show_default=True,
    type=click.Choice(SAMPLING_DEFAULTS_SOURCES),
    help="What a request's omitted temperature, top-p and top-k become (SGLang's flag): "
    "model: the folder's generation_config.json, then the API's defaults; openai: the "
    "API's defaults (temperature 1, top-p 1, no top-k). Passed on to --backend sglang.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
def engine(
    *,
    backend: str,
    sglang_args: str,
    ready_timeout_s: float,
    model: str,
    host: str,
    port: int,
    weight_version: str,
    device: str,
    served_model_name: str | None,
    max_concurrency: int,
    group_timeout_s: float,
    tool_call_parser: str | None,
    sampling_defaults: SamplingDefaultsSource,
    log_level: str,
) -> None:
    """Serve a model over SGLang's native API and OpenAI chat completions.

    \b
    reef engine --model tiny --port 30000
    curl localhost:30000/get_model_info
    """
    if backend == "sglang":
        _refuse_given(_REEF_ONLY, "is Reef's engine's only: pass SGLang's flag in --sglang-args")
        run_sglang_backend(
            model,
            host,
            port,
            shlex.split(sglang_args),
            ready_timeout_s,
            sampling_defaults=sampling_defaults if _given("sampling_defaults") else None,
        )
        return
    _refuse_given(("sglang_args", "ready_timeout_s"), "goes with --backend sglang only")
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
            tool_call_parser=tool_call_parser,
            sampling_defaults=sampling_defaults,
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


#: options that configure Reef's engine and mean nothing to SGLang
_REEF_ONLY = (
    "weight_version",
    "device",
    "served_model_name",
    "max_concurrency",
    "group_timeout_s",
    "tool_call_parser",
    "log_level",
)


def _given(name: str) -> bool:
    """The option ``name`` was given on the command line (not left at its default)."""
    source = click.get_current_context().get_parameter_source(name)
    return source is click.core.ParameterSource.COMMANDLINE


def _refuse_given(names: tuple[str, ...], why: str) -> None:
    """Exit 2 with one line when one of ``names`` was given on the command line."""
    for name in names:
        if _given(name):
            option = "--" + name.removesuffix("_s").replace("_", "-")
            click.echo(f"reef engine: {option} {why}", err=True)
            sys.exit(2)


def run_sglang_backend(
    model: str,
    host: str,
    port: int,
    extra_args: list[str],
    ready_timeout_s: float,
    *,
    sampling_defaults: str | None = None,
) -> None:
    """Run SGLang as a child until it ends; exit 2 with one line when it is not installed
    or the flags conflict, else with the child's status. ``sampling_defaults`` (given
    on the command line) is SGLang's own flag, passed on; unset, SGLang keeps its default
    (``model``, the same as Reef's)."""
    from reef.engine.errors import EngineError
    from reef.engine.sglang_launch import SglangLaunch, run_sglang, sglang_argv
    from reef.engine.sglang_launch import sglang_missing_message as missing

    def say(line: str) -> None:
        click.echo(f"reef engine: {line}", err=True)

    launch = SglangLaunch(
        model=model,
        host=host,
        port=port,
        extra_args=tuple(extra_args),
        sampling_defaults=sampling_defaults,
        ready_timeout_s=ready_timeout_s,
    )
    try:
        sglang_argv(launch)
    except EngineError as exc:
        say(str(exc))
        sys.exit(2)
    problem = missing()
    if problem is not None:
        say(problem)
        sys.exit(2)
    sys.exit(run_sglang(launch, say=say, announce=click.echo))


if __name__ == "__main__":
    engine()
