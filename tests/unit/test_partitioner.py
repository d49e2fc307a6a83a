"""reef.log.partitioner is Kafka's default partitioner, bit for bit.

Checked against aiokafka's DefaultPartitioner (what KafkaLog's producer uses) for
thousands of keys, against vectors from Kafka's own UtilsTest, and (marked ``kafka``,
it needs the jars of the local stack) against the real Java ``Utils.murmur2`` and
``BuiltInPartitioner.partitionForKey``.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given, settings
from hypothesis import strategies as st

from reef.log.partitioner import murmur2, partition_for

AIOKAFKA = DefaultPartitioner()
PARTITION_COUNTS = [1, 2, 3, 6, 7, 12, 16, 100, 1024]


def aiokafka_partition(key: bytes, partitions: int) -> int:
    everything = list(range(partitions))
    # "available" is shuffled on purpose: a keyed record must not depend on it
    available = random.Random(len(key)).sample(everything, k=max(1, partitions // 2))
    return int(AIOKAFKA(key, everything, available))


def fixed_keys() -> list[bytes]:
    """Edge cases: empty, every tail length, high bytes, unicode, long keys."""
    keys = [b"", b"\x00", b"\xff", b"\x80", b"\x7f"]
    for length in range(1, 13):  # 0-3 byte tails after 0, 1 and 2 full blocks
        keys.append(bytes(range(length)))
        keys.append(bytes(255 - i for i in range(length)))
        keys.append(b"\xff" * length)
    for text in [
        "a",
        "ab",
        "abc",
        "abcd",
        "scenario-1",
        "日本",
        "ключ",
        "é",
        "😀",
        "a😀",
        "ab😀",
        "default",
        "golden-scenario",
        " ",
        "\u0000",
        "x" * 1000,
    ]:
        keys.append(text.encode())
    return keys


def seeded_keys(count: int = 5000) -> list[bytes]:
    rng = random.Random(20240601)
    return [rng.randbytes(rng.randrange(0, 48)) for _ in range(count)]


# Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java#testMurmur2,
# re-checked against Utils.murmur2 of kafka-clients 4.1.1 (see the kafka-marked test).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


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


_JAVA = """\
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;

public class Murmur {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split(",", -1);
            byte[] key = HexFormat.of().parseHex(parts[0]);
            int partitions = Integer.parseInt(parts[1]);
            out.append(Utils.murmur2(key)).append(',')
               .append(BuiltInPartitioner.partitionForKey(key, partitions)).append('\\n');
        }
        System.out.print(out);
    }
}
"""


@pytest.mark.kafka
def test_matches_the_java_client(tmp_path: Path) -> None:
    from reef.stack import kafka
    from reef.stack.paths import load_settings

    install = kafka.ensure_installed(load_settings())
    assert (install.libs / f"kafka-clients-{kafka.KAFKA_VERSION}.jar").is_file()
    source = tmp_path / "Murmur.java"
    source.write_text(_JAVA)

    keys = fixed_keys() + list(JAVA_MURMUR2) + seeded_keys(3000)
    cases = [(key, PARTITION_COUNTS[i % len(PARTITION_COUNTS)]) for i, key in enumerate(keys)]
    result = subprocess.run(
        ["java", "-cp", install.classpath, str(source)],
        input="".join(f"{key.hex()},{n}\n" for key, n in cases),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert len(lines) == len(cases)
    for (key, partitions), line in zip(cases, lines, strict=True):
        java_hash, java_partition = (int(x) for x in line.split(","))
        assert murmur2(key) == java_hash, key
        assert partition_for(key, partitions) == java_partition, key
