"""Harness folders and the proposer's edit format, for ``harness_evolve`` (pure: no network).

A *harness* is a folder of UTF-8 text files (a system prompt, skills, rules). The
configured ``files`` patterns (``fnmatch`` on the relative POSIX path, in order) say
which files make the agent's system prompt: every matching file, each once, sorted
within a pattern, joined by a blank line. Only those paths may be edited, so every edit
reaches the prompt.

The proposer answers with exactly one JSON object (optionally inside one fenced
```` ```json ```` block), one of::

    {"op": "append",  "path": "rules/style.md", "text": "Always ..."}
    {"op": "replace", "path": "system_prompt.md", "old": "exact text", "new": "new text"}
    {"op": "write",   "path": "skills/dates.md", "text": "the whole file"}

with an optional ``"rationale"`` string. ``append`` adds a line block at the end (the
file may be new), ``replace`` needs ``old`` to occur exactly once, ``write`` sets the
whole file. Anything else (not JSON, another shape, an unknown key, a duplicate key, a
path outside the patterns, an edit that changes nothing) is an :class:`EditError`: the
candidate fails, closed.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from recipes.errors import RecipeError, TrainingError

EDIT_FORMAT = """Answer with exactly one JSON object and nothing else, one of:
{"op": "append", "path": "<file>", "text": "<text added at the end of the file>"}
{"op": "replace", "path": "<file>", "old": "<text occurring exactly once>", "new": "<text>"}
{"op": "write", "path": "<file>", "text": "<the whole new content of the file>"}
An optional "rationale" string may explain the edit. Propose ONE edit."""

_FENCE = re.compile(r"```(?:json)?[ \t]*\n(.*?)\n?[ \t]*```", re.S)


class EditError(TrainingError):
    """A proposal that is malformed or cannot be applied (the candidate fails)."""


class HarnessError(RecipeError):
    """A harness folder cannot be read as text."""


class _EditModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    path: str = Field(min_length=1, max_length=200)
    rationale: str = Field(default="", max_length=2000)


class AppendEdit(_EditModel):
    op: Literal["append"]
    text: str = Field(min_length=1)


class ReplaceEdit(_EditModel):
    op: Literal["replace"]
    old: str = Field(min_length=1)
    new: str


class WriteEdit(_EditModel):
    op: Literal["write"]
    text: str


Edit = Annotated[AppendEdit | ReplaceEdit | WriteEdit, Field(discriminator="op")]
_EDIT: TypeAdapter[AppendEdit | ReplaceEdit | WriteEdit] = TypeAdapter(Edit)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise EditError(f"the proposal repeats key(s) {', '.join(repeated)}")
    return dict(pairs)


def parse_edit(reply: str, *, max_chars: int) -> AppendEdit | ReplaceEdit | WriteEdit:
    """The one edit a proposer's reply holds; EditError when it is not exactly that."""
    text = reply.strip()
    fenced = _FENCE.fullmatch(text)
    if fenced:
        text = fenced.group(1).strip()
    if len(text) > max_chars:
        raise EditError(f"the proposal is {len(text)} characters long (limit {max_chars})")
    try:
        document = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as exc:
        raise EditError(f"the proposal is not one JSON object: {exc}") from exc
    if not isinstance(document, dict):
        raise EditError(f"the proposal is a JSON {type(document).__name__}, not an object")
    try:
        return _EDIT.validate_python(document)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'edit'}: {e['msg']}" for e in exc.errors()
        )
        raise EditError(f"the proposal is not a valid edit: {problems}") from exc


def allowed(path: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)


def check_path(path: str, patterns: Sequence[str]) -> str:
    """The normalised relative path, if it is a harness file an edit may touch."""
    if "\\" in path or "\x00" in path:
        raise EditError(f"path {path!r}: only plain POSIX paths are allowed")
    pure = PurePosixPath(path)
    if pure.is_absolute() or any(part in ("", ".", "..") for part in path.split("/")):
        raise EditError(f"path {path!r} must be relative, without '.' or '..' parts")
    normal = pure.as_posix()
    if not allowed(normal, patterns):
        raise EditError(f"path {normal!r} is not a harness file ({', '.join(patterns)})")
    return normal


def apply_edit(
    folder: Path,
    edit: AppendEdit | ReplaceEdit | WriteEdit,
    patterns: Sequence[str],
    *,
    max_file_chars: int,
) -> str:
    """Apply ``edit`` inside ``folder``; returns the changed path (EditError if it cannot)."""
    path = check_path(edit.path, patterns)
    target = folder / path
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise EditError(f"path {path!r} is not a regular file")
    try:
        current = target.read_text(encoding="utf-8") if target.exists() else None
    except (OSError, UnicodeDecodeError) as exc:
        raise EditError(f"cannot read {path!r}: {exc}") from exc
    if isinstance(edit, AppendEdit):
        head = current or ""
        if head and not head.endswith("\n"):
            head += "\n"
        updated = head + edit.text + ("" if edit.text.endswith("\n") else "\n")
    elif isinstance(edit, ReplaceEdit):
        if current is None:
            raise EditError(f"replace: {path!r} does not exist")
        found = current.count(edit.old)
        if found != 1:
            raise EditError(f"replace: the old text occurs {found} times in {path!r}, not once")
        updated = current.replace(edit.old, edit.new, 1)
    else:
        updated = edit.text
    if updated == current:
        raise EditError(f"the edit leaves {path!r} unchanged")
    if len(updated) > max_file_chars:
        raise EditError(f"{path!r} would be {len(updated)} characters (limit {max_file_chars})")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(updated, encoding="utf-8")
    return path


def prompt_paths(paths: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The paths composing the prompt, in order: per pattern the sorted matches, each once."""
    present = sorted(paths)
    chosen: list[str] = []
    for pattern in patterns:
        chosen += [p for p in present if fnmatch.fnmatchcase(p, pattern) and p not in chosen]
    return chosen


def compose(files: Mapping[str, str], patterns: Sequence[str]) -> str:
    """The system prompt of a harness given as {path: text} (e.g. ``GET /reef/harness``'s
    ``files``): the composing files' texts, stripped, joined by a blank line."""
    parts = [files[path].strip() for path in prompt_paths(list(files), patterns)]
    return "\n\n".join(part for part in parts if part)


def harness_files(folder: Path | None, patterns: Sequence[str]) -> list[tuple[str, str]]:
    """(path, text) of the folder's files composing the prompt, in composition order."""
    if folder is None:
        return []
    present = [
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink()
    ]
    out = []
    for path in prompt_paths(present, patterns):
        try:
            out.append((path, (folder / path).read_text(encoding="utf-8")))
        except UnicodeDecodeError as exc:
            raise HarnessError(f"harness file {path!r} is not UTF-8 text") from exc
    return out


def system_prompt(folder: Path | None, patterns: Sequence[str]) -> str:
    """The agent's system prompt the harness folder composes ('' for an empty harness)."""
    return compose(dict(harness_files(folder, patterns)), patterns)


def copy_harness(parent: Path | None, out_dir: Path) -> None:
    """A writable copy of the parent's files (the parent's tree is read-only)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if parent is None:
        return
    for source in sorted(parent.rglob("*")):
        if source.is_file() and not source.is_symlink():
            dest = out_dir / source.relative_to(parent)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(source.read_bytes())
