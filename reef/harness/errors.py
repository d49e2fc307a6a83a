"""Errors of the harness tree, its adapters and their install scripts (pure: no I/O).

Drawn in the tree of :mod:`reef.core.errors`::

    ReefError
    └── HarnessTreeError             a harness tree cannot be rendered for an agent
        ├── UnknownAdapterError      no adapter by that name
        ├── AdapterRefusedError      the adapter does not render an entry's kind
        ├── UnsafeHarnessPathError   a path is absolute, escapes the root or is malformed
        └── CredentialInTreeError    a config entry carries a credential

The HTTP layer maps them once: unknown adapter 404, the rest 409 (the release exists,
but cannot be installed for that agent); the CLI prints them as one line.
"""

from __future__ import annotations

from reef.core.errors import ReefError


class HarnessTreeError(ReefError):
    """A harness tree cannot be read or rendered; ``code`` is the stable API error code."""

    code = "invalid_harness_tree"


class UnknownAdapterError(HarnessTreeError):
    """No adapter is registered under that name."""

    code = "unknown_adapter"


class AdapterRefusedError(HarnessTreeError):
    """The adapter has no place for an entry of this kind (e.g. codex and code)."""

    code = "adapter_refused_kind"


class UnsafeHarnessPathError(HarnessTreeError):
    """A path that is absolute, climbs out with ``..`` or is not a plain relative path."""

    code = "unsafe_harness_path"


class CredentialInTreeError(HarnessTreeError):
    """A config entry names a credential; credentials are never rendered into files."""

    code = "credential_in_tree"
