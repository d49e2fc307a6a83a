"""The processor-host contract: one suite both hosts pass (not collected by itself).

A host runs the pure processors (join, release chain) over a log as ``reef streams``:
the embedded host on the embedded log, Reef's transactional loop on Kafka. Whatever the
host, while its process is SIGKILLed at random moments and restarted, and inputs are
redelivered (client resends, producer retries, second reports on a consumed receipt):

- the committed outputs are exactly the expected fates: no duplicate by event id or by
  report, none missing;
- the state the host holds durably is exactly the state replay rebuilds from the log.

Subclass :class:`HostContract` in a ``test_*.py`` module and provide a ``rig`` fixture.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from reef.api.context import processor_group
from reef.catalog import processors
from reef.core import topics
from reef.core.events import Event
from reef.core.state import Processor
from reef.log.base import EventLog
from reef.services.eventstore import EventStore
from reef.services.replay import DurableTables, live_digests, replay
from reef.settings import Settings
from tests.support.eos import check_eos, eos_plan
from tests.support.hosts import HostProcess


@dataclass
class HostRig:
    """A host process and a test-side view of the log it runs on."""

    settings: Settings
    log: EventLog
    host: HostProcess
    durable_tables: DurableTables

    @property
    def processors(self) -> Sequence[Processor]:
        return processors(self.settings)

    async def outputs(self) -> list[Event]:
        found = []
        async for stored in EventStore(self.log).read(topics.SAMPLES):
            assert stored.event is not None, stored.error
            found.append(stored.event)
        return found

    async def wait_for_outputs(self, count: int, timeout: float = 120.0) -> list[Event]:
        deadline = time.monotonic() + timeout
        while True:
            found = await self.outputs()
            if len({e.event_id for e in found}) >= count:
                return found
            self.host.assert_running()
            assert time.monotonic() < deadline, f"{len(found)} of {count} outputs in time"
            await asyncio.sleep(0.5)

    async def wait_inputs_committed(self, timeout: float = 60.0) -> None:
        """Every processor's group committed (with its outputs) every input record."""
        deadline = time.monotonic() + timeout
        while True:
            behind = {}
            for processor in self.processors:
                group = processor_group(self.settings, processor.name)
                for topic in processor.inputs:
                    ends = await self.log.end_offsets(topic)
                    done = await self.log.committed(group, topic)
                    lag = sum(end - done.get(p, 0) for p, end in ends.items())
                    if lag:
                        behind[f"{processor.name}:{topic}"] = lag
            if not behind:
                return
            self.host.assert_running()
            assert time.monotonic() < deadline, f"inputs not committed in time: {behind}"
            await asyncio.sleep(0.5)


class HostContract:
    KILLS = 5

    async def test_exactly_once_and_replay_equal_while_the_host_is_killed(
        self, rig: HostRig
    ) -> None:
        plan = eos_plan(reports=420, chunk_size=35, seed=11)
        store = EventStore(rig.log)
        rng = random.Random(5)
        chunks = list(plan.chunks)
        for _ in range(self.KILLS):
            rig.host.start()
            if rng.random() < 0.2:
                await asyncio.sleep(rng.uniform(0.5, 3.0))  # killed while starting
            else:
                await rig.host.wait_ready()
                for _ in range(2):  # two chunks, then a kill while they are processed
                    if chunks:
                        await store.append_all(chunks.pop(0))
                await asyncio.sleep(rng.uniform(0.05, 1.5))
            rig.host.kill()
            if chunks:  # produced while no host runs
                await store.append_all(chunks.pop(0))
        rig.host.start()
        await rig.host.wait_ready()
        while chunks:
            await store.append_all(chunks.pop(0))
        await rig.wait_for_outputs(len(plan.joined) + len(plan.rejected))
        await rig.wait_inputs_committed()

        check_eos(await rig.outputs(), plan)
        replayed = (await replay(rig.processors, rig.log)).digests()
        live = await live_digests(rig.processors, rig.log, rig.durable_tables)
        assert live == {name: replayed[name] for name in live}
