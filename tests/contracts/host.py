"""The processor-host contract: one suite both hosts pass (not collected by itself).

A host runs the pure processors (join, release chain, rollout controller) over a log as
``reef streams``: the embedded host on the embedded log, Reef's transactional loop on
Kafka. Whatever the host, while its process is SIGKILLed at random moments and restarted,
and inputs are redelivered (client resends, producer retries, second reports on a consumed receipt):

- the committed outputs are exactly the expected fates: no duplicate by event id or by
  report, none missing;
- the state the host holds durably is exactly the state replay rebuilds from the log;
- the rollout controller appends exactly one decision per rollout, and the chain commits
  exactly one promote of each promoted candidate.

Subclass :class:`HostContract` in a ``test_*.py`` module and provide a ``rig`` fixture
(:class:`JoinContract` alone: the join's part, for a variant of a host already tested
in full, such as its ``wire_format: confluent`` deployment).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reef.api.processor_watch import processor_group
from reef.catalog import processors
from reef.codec import MAGIC, EventCodec
from reef.core import topics
from reef.core.events import Event, ReleaseCommitted, RolloutDecided
from reef.core.rollout_control import PRODUCER as CONTROLLER
from reef.core.rollout_control import decision_id
from reef.core.state import Processor
from reef.log.base import EventLog
from reef.services.eventstore import EventStore
from reef.services.replay import DurableTables, live_digests, replay
from reef.settings import Settings
from tests.support.eos import check_eos, eos_plan
from tests.support.hosts import HostProcess
from tests.support.rollouts import rollout_plan


@dataclass
class HostRig:
    """A host process and a test-side view of the log it runs on."""

    settings: Settings
    log: EventLog
    host: HostProcess
    durable_tables: DurableTables
    #: the deployment's codec (its wire format); None: single-object, no registry
    codec: EventCodec | None = None

    @property
    def processors(self) -> Sequence[Processor]:
        return processors(self.settings)

    async def outputs(self) -> list[Event]:
        return await self.read(topics.SAMPLES)

    def store(self) -> EventStore:
        return EventStore(self.log, self.codec)

    async def read(self, topic: str) -> list[Event]:
        """Every record of ``topic``, decoded (a duplicate record is listed twice); each
        in the deployment's wire format, whoever wrote it (the test or the host)."""
        found = []
        header = b"\x00" if self.codec and self.codec.wire_format == "confluent" else MAGIC
        async for stored in self.store().read(topic):
            assert stored.event is not None, stored.error
            assert stored.record.value.startswith(header), stored.record
            found.append(stored.event)
        return found

    async def wait_releases(
        self, done: Callable[[list[Event]], bool], timeout: float = 120.0
    ) -> list[Event]:
        deadline = time.monotonic() + timeout
        while not done(found := await self.read(topics.RELEASES)):
            self.host.assert_running()
            assert time.monotonic() < deadline, f"reef.releases not as wanted in time: {found}"
            await asyncio.sleep(0.5)
        return found

    async def assert_replay_equal(self) -> None:
        """The state the host holds durably is the state replay rebuilds from the log."""
        replayed = (await replay(self.processors, self.log, self.codec)).digests()
        live = await live_digests(self.processors, self.log, self.durable_tables)
        assert live == {name: replayed[name] for name in live}

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
                group = processor_group(self.settings.deployment.log, processor.name)
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


class JoinContract:
    """The join's part of the contract: exactly once and replay equal under kills."""

    KILLS = 5

    async def test_exactly_once_and_replay_equal_while_the_host_is_killed(
        self, rig: HostRig
    ) -> None:
        plan = eos_plan(reports=420, chunk_size=35, seed=11)
        store = rig.store()
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
        await rig.assert_replay_equal()


class HostContract(JoinContract):
    """The whole contract: the join's, and the rollout controller's."""

    async def test_one_decision_per_rollout_while_the_host_is_killed(self, rig: HostRig) -> None:
        """The rollout controller appends one RolloutDecided per rollout, and the chain
        commits one promote, however often the host is SIGKILLed while deciding."""
        plan = rollout_plan(scenarios=4, exchanges=40, chunk_size=30)
        store = rig.store()
        rig.host.start()
        await rig.host.wait_ready()
        await store.append_all(plan.setup)
        await rig.wait_releases(lambda found: _pending_commits(found) == len(plan.starts))
        await store.append_all(plan.starts)
        chunks, rng = list(plan.chunks), random.Random(7)
        for _ in range(self.KILLS):
            for _ in range(2):
                if chunks:
                    await store.append_all(chunks.pop(0))
            await asyncio.sleep(rng.uniform(0.05, 1.0))  # killed while deciding, or not
            rig.host.kill()
            if chunks:
                await store.append_all(chunks.pop(0))
            rig.host.start()
            await rig.host.wait_ready()
        while chunks:
            await store.append_all(chunks.pop(0))
        found = await rig.wait_releases(lambda found: _promotes(found) == len(plan.starts))
        await rig.wait_inputs_committed()

        found = await rig.read(topics.RELEASES)
        decided = [e for e in found if isinstance(e, RolloutDecided)]
        assert sorted(e.scenario for e in decided) == sorted(s.scenario for s in plan.starts)
        assert all(e.event_id == decision_id(e.scenario, e.rollout_id) for e in decided)
        assert {e.outcome for e in decided} == {"promoted"}
        promotes = [
            e for e in found if isinstance(e, ReleaseCommitted) and e.operation == "promote"
        ]
        assert sorted((e.scenario, e.target_release_id) for e in promotes) == sorted(
            (s.scenario, s.candidate_release_id) for s in plan.starts
        )
        proposals = await rig.read(topics.RELEASE_PROPOSALS)
        assert len([e for e in proposals if e.producer == CONTROLLER]) == len(plan.starts)
        await rig.assert_replay_equal()


def _pending_commits(found: list[Event]) -> int:
    return sum(1 for e in found if isinstance(e, ReleaseCommitted) and e.pending)


def _promotes(found: list[Event]) -> int:
    return sum(1 for e in found if isinstance(e, ReleaseCommitted) and e.operation == "promote")
