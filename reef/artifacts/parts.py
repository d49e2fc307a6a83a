"""A composite release: one content carrying named parts (weights, harness), one folder each.

The manifest's paths::

    reef-parts.json   {"parts": [...]}: the parts present, sorted (the marker)
    weights/...       the weights part: a model folder or a PEFT adapter folder
    harness/...       the harness part: a harness tree (docs/harness.md)

A release without ``reef-parts.json`` at its top is a plain release: its files are one
artifact (weights, or a harness). A part absent from a composite release is that part's
empty state: the engine's base model, an empty harness. Each reader takes its own part
and nothing else: the sidecar loads :func:`weights_folder`, the harness routes serve
:func:`harness_part`. Since the parts travel in one content, a rollback (which republishes
a whole earlier content) restores every part together.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final, TypeVar

from reef.artifacts.manifest import Manifest, ManifestEntry, scan_tree
from reef.artifacts.store import hash_file

PARTS_FILE: Final = "reef-parts.json"
WEIGHTS: Final = "weights"
HARNESS: Final = "harness"
PART_NAMES: Final = (HARNESS, WEIGHTS)
#: the file that makes a weights folder a PEFT adapter
ADAPTER_CONFIG: Final = "adapter_config.json"

V = TypeVar("V")


def is_composite(folder: Path | None) -> bool:
    """Whether a release folder is composite (None, the empty release, is not)."""
    return folder is not None and (folder / PARTS_FILE).is_file()


def part_folder(folder: Path | None, part: str) -> Path | None:
    """One part of a composite release folder; None when the part is absent."""
    if folder is None:
        return None
    found = folder / part
    return found if found.is_dir() else None


def weights_folder(folder: Path | None) -> Path | None:
    """What an engine loads from a release folder: a composite's weights part (None: the
    base model), else the folder itself."""
    return part_folder(folder, WEIGHTS) if is_composite(folder) else folder


def is_adapter_manifest(files: Mapping[str, object]) -> bool:
    """Whether a release's weights (a composite's weights part) are a PEFT adapter."""
    prefix = WEIGHTS + "/" if PARTS_FILE in files else ""
    return prefix + ADAPTER_CONFIG in files


def harness_part(files: Mapping[str, V]) -> dict[str, V]:
    """A release's harness tree from its files: a composite's harness part, else them all."""
    if PARTS_FILE not in files:
        return dict(files)
    prefix = HARNESS + "/"
    return {path.removeprefix(prefix): v for path, v in files.items() if path.startswith(prefix)}


def write_marker(folder: Path, parts: Iterable[str]) -> None:
    """Mark ``folder`` as a composite release holding ``parts``."""
    body = json.dumps({"parts": sorted(set(parts))}) + "\n"
    (folder / PARTS_FILE).write_text(body, encoding="utf-8")


def folder_content_id(folder: Path | None) -> str:
    """The content id the folder would have as a release of its own (None: the empty one)."""
    if folder is None:
        return Manifest().content_id
    entries = {}
    for path, (file, mode) in scan_tree(folder).items():
        ref = hash_file(file)
        entries[path] = ManifestEntry(ref.oid, ref.size, mode)
    return Manifest(entries).content_id
