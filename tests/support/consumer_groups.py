"""A Kafka consumer group's members and their assignment, as the group coordinator sees it.

aiokafka 0.14's ``AIOKafkaAdminClient.describe_consumer_groups`` cannot be used for this:
it negotiates DescribeGroups v3 but decodes the answer with the v2 schema
(``DescribeGroupsRequest_v3.RESPONSE_TYPE`` is ``DescribeGroupsResponse_v2``, which lacks
v3's ``authorized_operations``), so against a broker that speaks v3 (Kafka 2.3 and later,
the local 4.1 included) the decode fails and the connection is closed. :func:`describe_group`
asks for v2 itself, through the admin client's connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.protocol.admin import DescribeGroupsRequest_v2


class _DescribeGroupsV2:
    """A request builder (what ``AIOKafkaConnection.send`` prepares) pinned to v2."""

    def __init__(self, groups: list[str]) -> None:
        self.groups = groups

    def prepare(self, versions: dict[int, tuple[int, int]]) -> DescribeGroupsRequest_v2:
        return DescribeGroupsRequest_v2(self.groups)


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    #: (topic, partition) pairs assigned to the member
    assignment: frozenset[tuple[str, int]]

    def partitions_of(self, topic: str) -> set[int]:
        return {p for t, p in self.assignment if t == topic}

    def partition_numbers(self) -> set[int]:
        return {p for _, p in self.assignment}


@dataclass(frozen=True)
class GroupState:
    group: str
    state: str  # "Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead"
    protocol: str  # the assignor chosen ("range", ...)
    members: tuple[Member, ...]

    def by_client_id(self) -> dict[str, Member]:
        return {m.client_id: m for m in self.members}


def _assignment(raw: bytes | None) -> frozenset[tuple[str, int]]:
    if not raw:
        return frozenset()
    decoded: Any = ConsumerProtocolMemberAssignment.decode(raw)
    return frozenset((tp.topic, tp.partition) for tp in decoded.partitions())


async def describe_group(bootstrap: str, group: str) -> GroupState:
    """The group's state, protocol and members with their assignment (DescribeGroups v2)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        node = await admin.find_coordinator(group)
        response: Any = await admin._client.send(node, _DescribeGroupsV2([group]))
    finally:
        await admin.close()
    ((error, name, state, _protocol_type, protocol, members),) = response.groups
    assert error == 0, f"DescribeGroups {group}: error code {error}"
    return GroupState(
        name,
        state,
        protocol,
        tuple(
            Member(member_id, client_id, _assignment(assignment))
            for member_id, client_id, _host, _metadata, assignment in members
        ),
    )
