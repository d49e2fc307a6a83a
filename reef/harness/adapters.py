"""Where each agent reads its harness: one small declarative description per adapter.

An adapter maps each entry kind to a path template under the agent's config root
(``{name}``: the entry's name, ``{path}``: its release path). A template without a
placeholder gathers every entry of its kind into one file: rules are joined into the
agent's instructions file, config objects merged into its settings file (JSON or TOML
by suffix). A kind the description leaves out is refused, never dropped silently.

Layouts, as documented by each agent (the install destination is the config root the
``root_env`` variable points the agent at):

* ``claude`` (Claude Code, ``CLAUDE_CONFIG_DIR``): ``CLAUDE.md``,
  ``skills/<name>/SKILL.md``, ``commands/<name>.md`` (slash commands),
  ``settings.json``. Code extensions are refused (a plugin needs a manifest).
* ``codex`` (OpenAI Codex CLI, ``CODEX_HOME``): ``AGENTS.md``,
  ``skills/<name>/SKILL.md``, ``prompts/<name>.md`` (custom prompts), ``config.toml``.
  Code extensions are refused (Codex has none).
* ``generic`` (a plain folder): every entry at its release path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from reef.harness.errors import UnknownAdapterError
from reef.harness.tree import EntryKind


@dataclass(frozen=True, slots=True)
class AdapterSpec:
    """How one agent's layout places each kind of entry."""

    name: str
    agent: str
    #: the environment variable that points the agent at the install destination
    root_env: str | None
    places: Mapping[EntryKind, str]

    def place(self, kind: EntryKind) -> str | None:
        """The path template for ``kind``, or None when this agent has no place for it."""
        return self.places.get(kind)


def _places(**templates: str) -> Mapping[EntryKind, str]:
    return MappingProxyType({EntryKind(kind): path for kind, path in templates.items()})


CLAUDE: Final = AdapterSpec(
    name="claude",
    agent="Claude Code",
    root_env="CLAUDE_CONFIG_DIR",
    places=_places(
        rules="CLAUDE.md",
        skill="skills/{name}/SKILL.md",
        agent_command="commands/{name}.md",
        config="settings.json",
    ),
)
CODEX: Final = AdapterSpec(
    name="codex",
    agent="OpenAI Codex CLI",
    root_env="CODEX_HOME",
    places=_places(
        rules="AGENTS.md",
        skill="skills/{name}/SKILL.md",
        agent_command="prompts/{name}.md",
        config="config.toml",
    ),
)
GENERIC: Final = AdapterSpec(
    name="generic",
    agent="a plain folder",
    root_env=None,
    places=_places(**{kind.value: "{path}" for kind in EntryKind}),
)

ADAPTERS: Final = MappingProxyType({spec.name: spec for spec in (CLAUDE, CODEX, GENERIC)})


def adapter(name: str) -> AdapterSpec:
    """The adapter called ``name``, or :class:`UnknownAdapterError` listing the known ones."""
    spec = ADAPTERS.get(name)
    if spec is None:
        known = ", ".join(sorted(ADAPTERS))
        raise UnknownAdapterError(f"no harness adapter {name!r} (known: {known})")
    return spec
