"""The processors' progress as the API shows it: lag per input and live rollouts.

The processors may run in other processes (``reef streams`` on Kafka), so what the API
shows is read from the log: each processor's committed offsets against the ends of its
inputs, and the rollout controller's durable rows. The metrics scrape cannot await, so
:meth:`ProcessorWatch.run` keeps a copy fresh in the background; the status route reads
the log at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any, Final, Literal

from reef.core.errors import ReefError
from reef.core.rollout_control import LIVE_PREFIX, RolloutController
from reef.core.state import Processor
from reef.core.topics import STREAMS_APP_ID
from reef.log.base import EventLog
from reef.services.replay import DurableRows

REFRESH_SECONDS: Final = 2.0


def processor_group(log: Literal["embedded", "kafka"], name: str) -> str:
    """The consumer group whose offsets record a processor's progress."""
    if log == "embedded":
        return f"processor:{name}"
    return STREAMS_APP_ID  # the stream workers' group; the log adds the topic prefix


class ProcessorWatch:
    """The deployment's processors, their lag and the controller's live rollouts."""

    def __init__(
        self,
        log: EventLog,
        kind: Literal["embedded", "kafka"],
        processors: Sequence[Processor] = (),
        durable_rows: DurableRows | None = None,
    ) -> None:
        self.log = log
        self.kind = kind
        self.processors = processors
        self._durable_rows = durable_rows
        #: input records each processor has not processed yet, per topic (as last read)
        self.lag: dict[str, dict[str, int]] = {}
        #: the controller's live rollouts by scenario (as last read)
        self.live_rollouts: dict[str, dict[str, Any]] = {}

    def group(self, name: str) -> str:
        return processor_group(self.kind, name)

    async def read_lag(self) -> dict[str, dict[str, int]]:
        """Each processor's unprocessed input records per topic, read now."""
        out: dict[str, dict[str, int]] = {}
        for processor in self.processors:
            group = self.group(processor.name)
            lag: dict[str, int] = {}
            for topic in processor.inputs:
                ends = await self.log.end_offsets(topic)
                done = await self.log.committed(group, topic)
                lag[topic] = sum(max(0, end - done.get(p, 0)) for p, end in ends.items())
            out[processor.name] = lag
        return out

    async def read_live_rollouts(self) -> dict[str, dict[str, Any]]:
        """The rollout controller's live rollouts, by scenario, as its host holds them."""
        if self._durable_rows is None:
            return {}
        rows = await self._durable_rows(self.log, RolloutController.name, LIVE_PREFIX)
        return {key.removeprefix(LIVE_PREFIX): value for key, value in rows.items()}

    async def run(self) -> None:
        """Keep :attr:`lag` and :attr:`live_rollouts` fresh until cancelled."""
        while True:
            with contextlib.suppress(ReefError):
                self.lag = await self.read_lag()
                self.live_rollouts = await self.read_live_rollouts()
            await asyncio.sleep(REFRESH_SECONDS)
