"""A release's harness as a typed tree: which file is a rule, a skill, a command, config.

A harness release is a folder of text files; its layout names each file's kind
(pure: no I/O, the files come in as ``{path: text}``)::

    system_prompt.md                 rules           "system_prompt" (always first)
    rules/<name>.md                  rules           <name>
    skills/<name>.md                 skill           <name>
    skills/<name>/SKILL.md           skill           <name>
    commands/<name>.md               agent_command   <name>
    config/<name>.json               config          <name> (a JSON object)
    extensions/<name>.<js|mjs|ts|py> code_extension  <name>
    anything else                    file            its path

Names are ``[A-Za-z0-9][A-Za-z0-9._-]{0,63}`` and unique per kind; paths are relative
POSIX paths that never climb out (``..``) or start at ``/``. Anything else is a
:class:`~reef.harness.errors.HarnessTreeError`, raised before anything is rendered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from reef.harness.errors import HarnessTreeError, UnsafeHarnessPathError

NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SEGMENT: Final = re.compile(r"[A-Za-z0-9._+@-]{1,128}")
SYSTEM_PROMPT: Final = "system_prompt.md"
EXTENSION_SUFFIXES: Final = (".js", ".mjs", ".ts", ".py")


class EntryKind(StrEnum):
    RULES = "rules"
    SKILL = "skill"
    AGENT_COMMAND = "agent_command"
    CONFIG = "config"
    CODE_EXTENSION = "code_extension"
    FILE = "file"


@dataclass(frozen=True, slots=True)
class HarnessEntry:
    """One typed node: its kind, its name, the release path it came from and its text."""

    kind: EntryKind
    name: str
    path: str
    text: str

    @property
    def suffix(self) -> str:
        """The file suffix of the release path (``.ts`` for an extension)."""
        dot = self.path.rfind(".")
        return self.path[dot:] if dot > self.path.rfind("/") else ""

    def settings(self) -> dict[str, Any]:
        """A config entry's JSON object (checked when the tree was read)."""
        value: dict[str, Any] = json.loads(self.text)
        return value


@dataclass(frozen=True, slots=True)
class HarnessTree:
    """The entries of a release, rules in prompt order, the rest sorted by path."""

    entries: tuple[HarnessEntry, ...]

    def of(self, kind: EntryKind) -> tuple[HarnessEntry, ...]:
        return tuple(e for e in self.entries if e.kind is kind)


def safe_path(path: str) -> str:
    """``path`` if it is a plain relative POSIX path inside its root, else an error."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        raise UnsafeHarnessPathError(f"path {path!r} is absolute or malformed")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise UnsafeHarnessPathError(f"path {path!r} escapes its root or has empty parts")
        if not _SEGMENT.fullmatch(segment):
            raise UnsafeHarnessPathError(f"path {path!r}: segment {segment!r} is not allowed")
    return path


def _named(path: str, name: str) -> str:
    if not NAME.fullmatch(name):
        raise HarnessTreeError(f"{path!r}: name {name!r} is not [A-Za-z0-9][A-Za-z0-9._-]*")
    return name


def classify(path: str) -> tuple[EntryKind, str]:
    """The kind and name the layout gives ``path`` (see the module docstring)."""
    parts = safe_path(path).split("/")
    stem, _, suffix = parts[-1].rpartition(".")
    if path == SYSTEM_PROMPT:
        return EntryKind.RULES, "system_prompt"
    if len(parts) == 2 and suffix == "md":
        kind = {"rules": EntryKind.RULES, "skills": EntryKind.SKILL}.get(parts[0])
        kind = kind or {"commands": EntryKind.AGENT_COMMAND}.get(parts[0])
        if kind is not None:
            return kind, _named(path, stem)
    if len(parts) == 3 and parts[0] == "skills" and parts[2] == "SKILL.md":
        return EntryKind.SKILL, _named(path, parts[1])
    if len(parts) == 2 and parts[0] == "config" and suffix == "json":
        return EntryKind.CONFIG, _named(path, stem)
    if len(parts) == 2 and parts[0] == "extensions" and f".{suffix}" in EXTENSION_SUFFIXES:
        return EntryKind.CODE_EXTENSION, _named(path, stem)
    return EntryKind.FILE, path


def _checked_config(path: str, text: str) -> None:
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise HarnessTreeError(f"config {path!r} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise HarnessTreeError(f"config {path!r} must be a JSON object")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _order(entry: HarnessEntry) -> tuple[int, str]:
    return (0 if entry.path == SYSTEM_PROMPT else 1, entry.path)


def tree_from_files(files: Mapping[str, str]) -> HarnessTree:
    """The typed tree of a release's ``{path: text}``; an error names the first bad path."""
    entries: list[HarnessEntry] = []
    seen: dict[tuple[EntryKind, str], str] = {}
    for path in sorted(files):
        kind, name = classify(path)
        if (kind, name) in seen:
            raise HarnessTreeError(f"{path!r} and {seen[kind, name]!r} are both {kind} {name!r}")
        seen[kind, name] = path
        if kind is EntryKind.CONFIG:
            _checked_config(path, files[path])
        entries.append(HarnessEntry(kind, name, path, files[path]))
    return HarnessTree(tuple(sorted(entries, key=_order)))
