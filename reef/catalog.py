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
        park_timeout=timedelta(seconds=settings.join.park_timeout_s),
        max_parked=settings.join.max_parked,
        merge_sessions=settings.join.merge_sessions,
    )


def session_settings(settings: Settings) -> SessionSettings:
    return SessionSettings(
        session_ttl=timedelta(seconds=settings.sessions.ttl_s),
        max_open_sessions=settings.sessions.max_open,
    )


def processors(settings: Settings) -> list[Processor]:
    hosted: list[Processor] = [JoinProcessor(join_settings(settings)), ReleaseChainProcessor()]
    if settings.sessions.track:
        hosted.append(SessionProcessor(session_settings(settings)))
        if settings.judge.turns:  # judged turns become reports (reef.core.feedback)
            hosted.append(FeedbackProcessor())
    if (
        settings.deployment.rollouts
    ):  # live outcomes decide canary releases (reef.core.rollout_control)
        hosted.append(RolloutController())
    return hosted
