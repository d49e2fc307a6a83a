"""The Kafka host's loop: an error the consumer raises ends the worker through the
exactly-once exit (status 75, "restart me"), never as an uncaught crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import pytest
from aiokafka.errors import KafkaError, UnknownError

from reef.settings import Settings
from streams.host import StreamsHost


class _Fatal(Exception):
    pass


class _AbortedConsumer:
    """What aiokafka's consumer does when a broker dies mid-rebalance: ``getmany``
    raises the error the group coordination aborted with."""

    async def getmany(self, **_: Any) -> dict[Any, Any]:
        raise UnknownError()


async def test_a_consumer_error_ends_the_worker_through_the_fatal_exit(tmp_path: Path) -> None:
    ended: list[tuple[str, BaseException | None]] = []

    def on_fatal(reason: str, exc: BaseException | None) -> NoReturn:
        ended.append((reason, exc))
        raise _Fatal(reason)

    host = StreamsHost(Settings(state_dir=tmp_path), tmp_path / "data", on_fatal=on_fatal)
    host._consumer = _AbortedConsumer()
    with pytest.raises(_Fatal):
        await host._loop()
    assert [(reason, type(exc)) for reason, exc in ended] == [
        ("the consumer failed", UnknownError)
    ]
    assert isinstance(ended[0][1], KafkaError)
