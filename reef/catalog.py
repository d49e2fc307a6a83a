"""The processors a deployment runs, configured from settings."""

from __future__ import annotations

from datetime import timedelta

from reef.core.chain import ReleaseChainProcessor
from reef.core.feedback import FeedbackProcessor
from reef.core.join import JoinProcessor, JoinSettings
from reef.core.rollout_control import RolloutController
from reef.core.sessions import SessionProcessor, SessionSettings
from reef.core.state import Processor
from reef.settings import Settings


def join_settings(settings: Settings) -> JoinSettings:
    return JoinSettings(
        park_timeout=timedelta(seconds=settings.join_park_timeout_s),
        max_parked=settings.join_max_parked,
        merge_sessions=settings.merge_sessions,
    )


def session_settings(settings: Settings) -> SessionSettings:
    return SessionSettings(
        session_ttl=timedelta(seconds=settings.session_ttl_s),
        max_open_sessions=settings.max_open_sessions,
    )


def processors(settings: Settings) -> list[Processor]:
    hosted: list[Processor] = [JoinProcessor(join_settings(settings)), ReleaseChainProcessor()]
    if settings.track_sessions:
        hosted.append(SessionProcessor(session_settings(settings)))
        if settings.judge_turns:  # judged turns become reports (reef.core.feedback)
            hosted.append(FeedbackProcessor())
    if settings.rollouts:  # live outcomes decide canary releases (reef.core.rollout_control)
        hosted.append(RolloutController())
    return hosted
