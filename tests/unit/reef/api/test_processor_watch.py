"""What the API shows of the processors (lag, live rollouts) and its background tasks."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from reef.api.background import BackgroundTasks
from reef.api.processor_watch import ProcessorWatch
from reef.core.rollout_control import LIVE_PREFIX
from reef.log.base import EventLog
from reef.log.embedded import EmbeddedLog


async def test_lag_is_each_input_end_minus_the_processors_committed_offsets(
    tmp_path: Path,
) -> None:
    log = EmbeddedLog(tmp_path / "log.sqlite3", partitions=1)
    await log.start()
    try:
        await log.ensure_topics(["a", "b"])
        for n in range(5):
            await log.append("a", b"k", b"%d" % n)
        await log.append("b", b"k", b"x")
        join = cast(Any, SimpleNamespace(name="join", inputs=("a", "b")))
        watch = ProcessorWatch(log, "embedded", [join])
        assert await watch.read_lag() == {"join": {"a": 5, "b": 1}}
        await log.commit("processor:join", "a", {0: 3})
        assert await watch.read_lag() == {"join": {"a": 2, "b": 1}}
        assert watch.group("join") == "processor:join"
        assert ProcessorWatch(log, "kafka").group("join") != "processor:join"
        # the background copy the metrics scrape reads follows the log
        task = asyncio.create_task(watch.run())
        try:
            async with asyncio.timeout(5):
                while watch.lag != {"join": {"a": 2, "b": 1}}:
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
    finally:
        await log.close()


async def test_live_rollouts_are_the_controllers_durable_rows_by_scenario() -> None:
    async def rows(log: EventLog, processor: str, prefix: str) -> dict[str, Any]:
        assert (processor, prefix) == ("rollouts", LIVE_PREFIX)
        return {LIVE_PREFIX + "s1": {"rollout_id": "r1"}}

    log = cast(EventLog, object())
    assert await ProcessorWatch(log, "embedded", durable_rows=rows).read_live_rollouts() == {
        "s1": {"rollout_id": "r1"}
    }
    assert await ProcessorWatch(log, "embedded").read_live_rollouts() == {}


async def test_a_spawned_task_outlives_its_caller_and_drain_waits_for_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = BackgroundTasks()
    done: list[str] = []

    async def work(name: str, fail: bool = False) -> None:
        await asyncio.sleep(0.05)
        if fail:
            raise RuntimeError("boom")
        done.append(name)

    async def request() -> None:
        tasks.spawn(work("kept"), name="kept")
        tasks.spawn(work("failed", fail=True), name="failing")
        await asyncio.sleep(10)

    caller = asyncio.create_task(request())
    await asyncio.sleep(0)
    caller.cancel()
    with caplog.at_level(logging.ERROR), pytest.raises(asyncio.CancelledError):
        await caller
    with caplog.at_level(logging.ERROR):
        await tasks.drain()
        await asyncio.sleep(0)
    assert done == ["kept"]
    assert "background task failing failed" in caplog.text
