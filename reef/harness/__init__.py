"""Harness releases as installable agent configuration (pure: no I/O in this package).

A release's files become a typed tree (:mod:`reef.harness.tree`), an adapter's
declarative layout (:mod:`reef.harness.adapters`) places each entry
(:mod:`reef.harness.render`), and :mod:`reef.harness.install` writes the self-contained
``sh`` script that installs, verifies, prunes and records it.
"""

from __future__ import annotations

from collections.abc import Mapping

from reef.harness.adapters import ADAPTERS, AdapterSpec, adapter
from reef.harness.errors import (
    AdapterRefusedError,
    CredentialInTreeError,
    HarnessTreeError,
    UnknownAdapterError,
    UnsafeHarnessPathError,
)
from reef.harness.install import (
    RECORD_FILE,
    InstallRecord,
    install_script,
    sha256_text,
    tree_digest,
)
from reef.harness.render import render
from reef.harness.tree import EntryKind, HarnessEntry, HarnessTree, tree_from_files


def render_files(files: Mapping[str, str], adapter_name: str) -> dict[str, str]:
    """A release's ``{path: text}`` in the named adapter's layout."""
    spec = adapter(adapter_name)
    return render(tree_from_files(files), spec)


def release_install_script(
    files: Mapping[str, str], adapter_name: str, *, scenario: str, release_id: str
) -> str:
    """The install script of a release's ``{path: text}`` for the named adapter."""
    spec = adapter(adapter_name)
    rendered = render(tree_from_files(files), spec)
    return install_script(rendered, spec=spec, scenario=scenario, release_id=release_id)


__all__ = [
    "ADAPTERS",
    "RECORD_FILE",
    "AdapterRefusedError",
    "AdapterSpec",
    "CredentialInTreeError",
    "EntryKind",
    "HarnessEntry",
    "HarnessTree",
    "HarnessTreeError",
    "InstallRecord",
    "UnknownAdapterError",
    "UnsafeHarnessPathError",
    "adapter",
    "install_script",
    "release_install_script",
    "render",
    "render_files",
    "sha256_text",
    "tree_digest",
    "tree_from_files",
]
