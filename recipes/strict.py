"""The base of every recipe configuration model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Frozen, and unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")
