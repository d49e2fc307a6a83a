"""Render a typed harness tree into one agent's layout (pure: ``{path: text}`` out).

Rules for every adapter:

1. Every entry's kind must have a place in the adapter, or the whole render fails
   (:class:`AdapterRefusedError`); nothing is partially rendered.
2. Config entries never carry credentials: a key that names one (``api_key``, ``token``,
   ``secret``, ``password``, ``authorization``, ...) at any depth fails the render
   (:class:`CredentialInTreeError`). Model bindings are the user's, set at run time.
3. Gathered files: rules joined in prompt order by a blank line; config objects merged
   in path order (a later object's keys win, nested objects merge), written as JSON
   (sorted keys) or TOML by the target's suffix.
4. A ``SKILL.md`` without front matter gets one (``name``, ``description`` from the
   first line), as Claude Code and Codex require; a layout that keeps release paths
   (``{path}``) keeps the text as it is.
5. Every rendered path is checked again: relative, inside the root.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from reef.harness.adapters import AdapterSpec
from reef.harness.errors import AdapterRefusedError, CredentialInTreeError, HarnessTreeError
from reef.harness.toml import to_toml
from reef.harness.tree import EntryKind, HarnessEntry, HarnessTree, safe_path

CREDENTIAL_KEY: Final = re.compile(
    r"api[_-]?key|secret|token|passw(or)?d|authorization|credential|bearer|private[_-]?key",
    re.IGNORECASE,
)
_GATHERED: Final = (EntryKind.RULES, EntryKind.CONFIG)


def render(tree: HarnessTree, spec: AdapterSpec) -> dict[str, str]:
    """``{path under the agent's root: text}`` for ``tree`` in ``spec``'s layout, sorted."""
    gathered: dict[str, list[HarnessEntry]] = {}
    out: dict[str, str] = {}
    for entry in tree.entries:
        template = spec.place(entry.kind)
        if template is None:
            raise AdapterRefusedError(
                f"the {spec.name} adapter does not render {entry.kind} entries ({entry.path!r})"
            )
        if entry.kind is EntryKind.CONFIG:
            refuse_credentials(entry.settings(), entry.path)
        if entry.kind in _GATHERED and "{" not in template:
            gathered.setdefault(template, []).append(entry)
            continue
        path = safe_path(template.format(name=entry.name, path=entry.path))
        if path in out:
            raise HarnessTreeError(f"two entries render to {path!r} for {spec.name}")
        verbatim = template == "{path}" or not path.endswith("/SKILL.md")
        out[path] = entry.text if verbatim else with_front_matter(entry)
    for path, entries in gathered.items():
        if path in out:
            raise HarnessTreeError(f"two entries render to {path!r} for {spec.name}")
        out[safe_path(path)] = _gather(path, entries)
    return dict(sorted(out.items()))


def _gather(path: str, entries: list[HarnessEntry]) -> str:
    if entries[0].kind is EntryKind.RULES:
        parts = [e.text.strip() for e in entries]
        return "\n\n".join(p for p in parts if p) + "\n"
    merged: dict[str, Any] = {}
    for entry in entries:
        merged = merge(merged, entry.settings())
    if path.endswith(".toml"):
        return to_toml(merged)
    return json.dumps(merged, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``update`` on top; nested objects merge key by key."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def refuse_credentials(value: Any, where: str, trail: str = "") -> None:
    """Raise if any key of ``value``, at any depth, names a credential."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            here = f"{trail}.{key}" if trail else str(key)
            if CREDENTIAL_KEY.search(str(key)):
                raise CredentialInTreeError(
                    f"config {where!r} sets {here!r}: credentials are never rendered"
                )
            refuse_credentials(inner, where, here)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            refuse_credentials(inner, where, f"{trail}[{index}]")


def with_front_matter(entry: HarnessEntry) -> str:
    """The skill's text, led by the ``---`` front matter agents read a skill's name from."""
    if entry.text.startswith("---\n"):
        return entry.text
    lines = (line.strip().lstrip("#").strip() for line in entry.text.splitlines())
    description = next((line for line in lines if line), entry.name)
    head = f"---\nname: {entry.name}\ndescription: {json.dumps(description)}\n---\n\n"
    return head + entry.text
