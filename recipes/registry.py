"""From the deployment's ``recipe`` setting to a configured :class:`~recipes.base.Recipe`.

The setting names a built-in recipe (``core``, ``sft``, ``grpo``, ``harness_evolve``) or a
dotted path ``pkg.mod:Name`` to a :class:`Recipe` subclass. Its configuration is the
``recipe:`` section of a YAML file (``recipe_config`` setting, or the ``-c`` file of
the command); relative paths in it are read relative to that file. Everything is
validated here, once, at start: an unknown key or a wrong type raises
:class:`~recipes.errors.RecipeConfigError` naming the key. A recipe that uses the
deployment's own settings (``harness_evolve`` calls its upstream) has
``bind_deployment(settings)``, called here at start too.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml

from recipes.base import Recipe
from recipes.errors import RecipeConfigError
from reef.settings import Settings

BUILTIN: dict[str, str] = {
    "core": "recipes.core:CoreRecipe",
    "sft": "recipes.sft:SftRecipe",
    "grpo": "recipes.grpo:GrpoRecipe",
    "harness_evolve": "recipes.harness_evolve:HarnessEvolveRecipe",
}
#: names reserved for recipes this version does not have yet
NOT_YET: frozenset[str] = frozenset()


@runtime_checkable
class DeploymentBound(Protocol):
    """A recipe that reads the deployment's settings (e.g. its upstream) at start."""

    def bind_deployment(self, settings: Settings) -> None: ...


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
    name: str, data: Mapping[str, Any] | None = None, *, base_dir: Path | None = None
) -> Recipe[Any]:
    """Resolve ``name`` and validate its configuration (RecipeConfigError names the key)."""
    cls = recipe_class(name)
    config = cls.parse_config(_dashes(dict(data or {})), base_dir=base_dir)
    return cls(config)


def recipe_from_settings(settings: Settings, config_file: Path | None = None) -> Recipe[Any]:
    """The deployment's recipe, configured from ``recipe_config`` (else ``config_file``)."""
    path = settings.recipe_config or config_file
    data = read_section(path) if path is not None else {}
    recipe = build_recipe(settings.recipe, data, base_dir=path.parent if path else None)
    if isinstance(recipe, DeploymentBound):
        recipe.bind_deployment(settings)
    return recipe


def _dashes(value: Any) -> Any:
    """YAML keys may be written with dashes (``batch-size``), as Reef's own settings."""
    if isinstance(value, dict):
        return {str(k).replace("-", "_"): _dashes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dashes(v) for v in value]
    return value
