"""From the deployment's ``recipe`` setting to a configured :class:`~recipes.base.Recipe`.

The setting names a built-in recipe (``core``, ``sft``, ``grpo``, ``sao``,
``openclaw_rl``, ``harness_evolve``, ``gepa``, ``composite``) or a dotted path
``pkg.mod:Name`` to a :class:`Recipe` subclass.
Its configuration is the ``recipe:`` section of a YAML file (``recipe_config`` setting,
or the ``-c`` file of the command); relative paths in it are read relative to that file.
Everything is validated here, once, at start: an unknown key or a wrong type raises
:class:`~recipes.errors.RecipeConfigError` naming the key. A recipe that depends on the
deployment (``harness_evolve`` calls its upstream; ``sao`` and ``openclaw_rl`` say what
it does not record) has ``bind_deployment(facts)``, called here at start too with a
:class:`~recipes.base.DeploymentFacts`: the few facts a recipe may know, never the
deployment's settings.

The registry is where a recipe meets its effects: a recipe that trains through the
:class:`~recipes.training.TrainingBackend` port (``sft``, ``grpo``, ``sao``,
``openclaw_rl``: it has ``bind_backend``) gets the backend passed in, by default the
in-process torch backend (:class:`trainers.backends.inprocess.InProcessBackend`,
torch-free until it trains); one that talks to a model through the
:class:`~recipes.chat.ChatClient` port (``harness_evolve``: it has ``bind_chat``) gets
the HTTP client (:class:`trainers.backends.chat.HttpChatClient`) unless another is
passed. ``composite`` has ``bind_backend``, ``bind_chat`` and ``bind_deployment`` and
hands each to its part.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml

from recipes.base import DeploymentFacts, Recipe
from recipes.chat import ChatBound, ChatClient
from recipes.errors import RecipeConfigError
from recipes.training import BackendBound, TrainingBackend
from reef.settings import Settings
from trainers.backends.chat import HttpChatClient
from trainers.backends.inprocess import InProcessBackend

BUILTIN: dict[str, str] = {
    "core": "recipes.core:CoreRecipe",
    "sft": "recipes.sft:SftRecipe",
    "grpo": "recipes.grpo:GrpoRecipe",
    "sao": "recipes.sao.recipe:SAORecipe",
    "openclaw_rl": "recipes.openclaw_rl.recipe:OpenClawRLRecipe",
    "harness_evolve": "recipes.harness_evolve:HarnessEvolveRecipe",
    "gepa": "recipes.gepa.recipe:GEPARecipe",
    "composite": "recipes.composite.recipe:CompositeRecipe",
}
#: names reserved for recipes this version does not have yet
NOT_YET: frozenset[str] = frozenset()


@runtime_checkable
class DeploymentBound(Protocol):
    """A recipe told the deployment's facts (e.g. its upstream) at start."""

    def bind_deployment(self, deployment: DeploymentFacts) -> None: ...


def deployment_facts(settings: Settings) -> DeploymentFacts:
    """What a recipe is told of the deployment ``settings`` describe."""
    key = settings.upstream.api_key
    return DeploymentFacts(
        upstream_url=settings.upstream.url,
        upstream_dialect=settings.upstream.dialect,
        upstream_api_key=key.get_secret_value() if key is not None else None,
        upstream_model=settings.upstream.model,
        track_sessions=settings.sessions.track,
        judge_turns=settings.judge.turns,
        record_tokens=settings.recording.tokens or settings.recording.top_logprobs > 0,
        record_top_logprobs=settings.recording.top_logprobs,
    )


def recipe_class(name: str) -> type[Recipe[Any]]:
    """The class a recipe name resolves to."""
    if name in NOT_YET:
        raise RecipeConfigError(f"recipe {name!r} is not implemented in this version of Reef")
    path = BUILTIN.get(name, name)
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        known = ", ".join(BUILTIN)
        raise RecipeConfigError(f"unknown recipe {name!r} (built-in: {known}; or pkg.mod:Class)")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RecipeConfigError(f"recipe {name!r}: cannot import {path}: {exc}") from exc
    if not (isinstance(found, type) and issubclass(found, Recipe)):
        raise RecipeConfigError(f"recipe {name!r}: {path} is not a Recipe subclass")
    return found


def read_section(path: Path) -> dict[str, Any]:
    """The ``recipe:`` mapping of a YAML file (empty if the file has none)."""
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise RecipeConfigError(f"cannot read recipe config {path}: {exc}") from exc
    if not isinstance(document, Mapping):
        raise RecipeConfigError(f"{path}: expected a mapping at the top level")
    section = document.get("recipe", {}) or {}
    if not isinstance(section, Mapping):
        raise RecipeConfigError(f"{path}: 'recipe' must be a mapping")
    return {str(k).replace("-", "_"): v for k, v in section.items()}


def build_recipe(
    name: str,
    data: Mapping[str, Any] | None = None,
    *,
    base_dir: Path | None = None,
    backend: TrainingBackend | None = None,
    chat: ChatClient | None = None,
) -> Recipe[Any]:
    """Resolve ``name`` and validate its configuration (RecipeConfigError names the key);
    a recipe with ``bind_backend`` gets ``backend`` (default: the in-process one), one
    with ``bind_chat`` gets ``chat`` (default: the HTTP client)."""
    cls = recipe_class(name)
    config = cls.parse_config(_dashes(dict(data or {})), base_dir=base_dir)
    recipe = cls(config)
    if isinstance(recipe, BackendBound):
        recipe.bind_backend(backend if backend is not None else InProcessBackend())
    if isinstance(recipe, ChatBound):
        recipe.bind_chat(chat if chat is not None else HttpChatClient())
    return recipe


def recipe_from_settings(
    settings: Settings,
    config_file: Path | None = None,
    *,
    backend: TrainingBackend | None = None,
    chat: ChatClient | None = None,
) -> Recipe[Any]:
    """The deployment's recipe, configured from ``recipe_config`` (else ``config_file``)."""
    path = settings.deployment.recipe_config or config_file
    data = read_section(path) if path is not None else {}
    recipe = build_recipe(
        settings.deployment.recipe,
        data,
        base_dir=path.parent if path else None,
        backend=backend,
        chat=chat,
    )
    if isinstance(recipe, DeploymentBound):
        recipe.bind_deployment(deployment_facts(settings))
    return recipe


def _dashes(value: Any) -> Any:
    """YAML keys may be written with dashes (``batch-size``), as Reef's own settings."""
    if isinstance(value, dict):
        return {str(k).replace("-", "_"): _dashes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dashes(v) for v in value]
    return value
