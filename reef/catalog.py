"""The processors a deployment runs, configured from settings."""

from __future__ import annotations

from datetime import timedelta

from reef.core.chain import ReleaseChainProcessor
from reef.core.join import JoinProcessor, JoinSettings
from reef.core.state import Processor
from reef.settings import Settings


def join_settings(settings: Settings) -> JoinSettings:
    return JoinSettings(
        park_timeout=timedelta(seconds=settings.join_park_timeout_s),
        max_parked=settings.join_max_parked,
        merge_sessions=settings.merge_sessions,
    )


def processors(settings: Settings) -> list[Processor]:
    return [JoinProcessor(join_settings(settings)), ReleaseChainProcessor()]
