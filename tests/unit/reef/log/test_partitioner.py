"""reef.log.partitioner is Kafka's default partitioner, bit for bit.

Checked against aiokafka's DefaultPartitioner (what KafkaLog's producer uses) for
thousands of keys and against vectors from Kafka's own UtilsTest; against the real Java
client in tests/integration/test_partitioner_java.py.
"""

from __future__ import annotations

import random

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given, settings
from hypothesis import strategies as st

from reef.log.partitioner import murmur2, partition_for
from tests.support.partition_keys import JAVA_MURMUR2, PARTITION_COUNTS, fixed_keys, seeded_keys

AIOKAFKA = DefaultPartitioner()


def aiokafka_partition(key: bytes, partitions: int) -> int:
    everything = list(range(partitions))
    # "available" is shuffled on purpose: a keyed record must not depend on it
    available = random.Random(len(key)).sample(everything, k=max(1, partitions // 2))
    return int(AIOKAFKA(key, everything, available))


@pytest.mark.parametrize(("key", "expected"), list(JAVA_MURMUR2.items()))
def test_java_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_is_a_signed_32_bit_int() -> None:
    for key in fixed_keys() + seeded_keys(500):
        value = murmur2(key)
        assert -(2**31) <= value < 2**31


def test_fixed_keys_match_aiokafka() -> None:
    for key in fixed_keys():
        assert murmur2(key) & 0xFFFFFFFF == aiokafka_murmur2(key), key
        for partitions in PARTITION_COUNTS:
            assert partition_for(key, partitions) == aiokafka_partition(key, partitions), key


def test_thousands_of_seeded_keys_match_aiokafka() -> None:
    for i, key in enumerate(seeded_keys()):
        partitions = PARTITION_COUNTS[i % len(PARTITION_COUNTS)]
        assert partition_for(key, partitions) == aiokafka_partition(key, partitions), key


@settings(max_examples=2000, deadline=None, derandomize=True)
@given(key=st.binary(max_size=64), partitions=st.integers(1, 1024))
def test_any_bytes_match_aiokafka(key: bytes, partitions: int) -> None:
    assert murmur2(key) & 0xFFFFFFFF == aiokafka_murmur2(key)
    assert partition_for(key, partitions) == aiokafka_partition(key, partitions)


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(scenario=st.text(max_size=40), partitions=st.sampled_from(PARTITION_COUNTS))
def test_any_scenario_name_matches_aiokafka(scenario: str, partitions: int) -> None:
    key = scenario.encode()  # EventStore keys records by the UTF-8 scenario name
    partition = partition_for(key, partitions)
    assert 0 <= partition < partitions
    assert partition == aiokafka_partition(key, partitions)


def test_partitions_are_spread() -> None:
    counts = [0] * 6
    for i in range(6000):
        counts[partition_for(f"scenario-{i}".encode(), 6)] += 1
    assert min(counts) > 800, counts
