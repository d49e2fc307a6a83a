"""The trainer's own error (drawn in the tree of :mod:`reef.core.errors`)."""

from __future__ import annotations

from reef.core.errors import ReefError


class TrainerError(ReefError):
    """The trainer cannot go on (e.g. the chain never decided a proposal)."""
