"""``reef samples show``: a joined sample, and with ``--as-trained`` exactly what the
deployment's recipe and model would train on for it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click

from reef.cli.options import log_options, pop_log_flags, settings_from
from reef.core.errors import ConfigError
from reef.core.topics import SAMPLES
from reef.settings import Settings

TRAIN_OPEN = "[train]"
TRAIN_CLOSE = "[/train]"


@click.group("samples")
def samples() -> None:
    """Look at the samples the join produced."""


@samples.command("show")
@click.argument("sample_id")
@click.option(
    "--as-trained",
    is_flag=True,
    help="Print the text the recipe would train on, trained spans between "
    f"{TRAIN_OPEN} and {TRAIN_CLOSE}, with token counts and what the context rule cut.",
)
@click.option(
    "--model",
    "model",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    help="Render with this model folder's tokenizer instead of training.base_model's.",
)
@log_options
def show(
    sample_id: str,
    as_trained: bool,
    model: Path | None,
    config_file: Path | None,
    **flags: Any,
) -> None:
    """Show sample SAMPLE_ID (its event id on reef.samples)."""
    loaded = settings_from(config_file, **pop_log_flags(flags))
    try:
        sample = asyncio.run(_find(loaded.settings, sample_id))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    if sample is None:
        raise click.ClickException(f"no sample {sample_id!r} on {SAMPLES}")
    if not as_trained:
        click.echo(json.dumps(_described(sample), indent=2, ensure_ascii=False))
        return
    from recipes.registry import recipe_from_settings

    recipe = recipe_from_settings(loaded.settings, config_file)
    click.echo(_as_trained(recipe, sample, model))


async def _find(settings: Settings, sample_id: str) -> Any:
    from recipes.samples import sample_from_event
    from reef.artifacts import ClaimCheck, open_store
    from reef.core.events import SampleJoined
    from reef.history import open_stream

    claims = ClaimCheck(open_store(settings), settings.artifacts.claim_check_bytes)
    async with open_stream(settings, SAMPLES) as stream:
        async for record in stream:
            event = record.event
            if isinstance(event, SampleJoined) and event.event_id == sample_id:
                if record.erased:
                    raise click.ClickException(f"sample {sample_id!r} holds an erased record")
                return sample_from_event(
                    event,
                    partition=record.partition,
                    offset=record.offset,
                    resolve=lambda ref: claims.resolve(None, ref),
                )
    return None


def _described(sample: Any) -> dict[str, Any]:
    return {
        "sample_id": sample.sample_id,
        "scenario": sample.scenario,
        "report_id": sample.report_id,
        "score": sample.score,
        "feedback": sample.feedback,
        "release_ids": list(sample.release_ids),
        "turns": [
            {
                "receipt": turn.receipt,
                "route": turn.route,
                "tools": [t["function"]["name"] for t in turn.tools()],
                "messages": turn.messages(),
                "answer": _answer(turn),
            }
            for turn in sample.turns
        ],
    }


def _answer(turn: Any) -> list[dict[str, Any]]:
    from reef.core.dialogue.chat_template import template_messages

    return template_messages(turn.answer_messages())


def _as_trained(recipe: Any, sample: Any, model: Path | None) -> str:
    from recipes.rendering import Trajectory, render

    example = getattr(recipe, "example", None)
    if example is None:
        raise click.ClickException(
            f"recipe {recipe.name!r} does not train on rendered text (it trains on the token "
            "ids the engine recorded, or on a harness); --as-trained shows sft's rendering"
        )
    found = example(sample)
    if found is None:
        raise click.ClickException(
            f"recipe {recipe.name!r} has no training signal in sample {sample.sample_id!r} "
            "(no correction, and a score under training.imitate_min_score)"
        )
    training = recipe.config.training
    tokenizer = _tokenizer(model, training.base_model)
    if not isinstance(found, Trajectory):
        messages, target = found
        found = Trajectory.of(
            [*messages, {"role": "assistant", "content": target}], [], len(messages)
        )
    try:
        rendered = render(tokenizer, found, training.max_length)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    body = "".join(
        f"{TRAIN_OPEN}{s.text}{TRAIN_CLOSE}" if s.trained else s.text for s in rendered.segments
    )
    summary = (
        f"\n--\nrecipe {recipe.name}, model {model or training.base_model}: "
        f"{len(rendered.ids)} tokens, {rendered.trained_tokens} trained "
        f"({len(found.trained)} assistant turn(s), trained_turns="
        f"{getattr(training, 'trained_turns', 'last')}); cut by the context rule "
        f"(max_length {training.max_length}): {rendered.cut_messages} message(s), "
        f"{rendered.cut_tokens} token(s)"
    )
    return body + summary


def _tokenizer(model: Path | None, base_model: str) -> Any:
    from reef.modelkit.tiny import BUILTIN_MODELS, build_tokenizer

    if model is None and base_model in BUILTIN_MODELS:
        return build_tokenizer()
    from transformers import AutoTokenizer

    path = model or Path(base_model)
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot load the tokenizer of {path}: {exc}") from exc
