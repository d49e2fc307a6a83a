"""Keys the partitioner tests hash: fixed edge cases, seeded random ones, Kafka's vectors."""

from __future__ import annotations

import random

#: partition counts the partitioner is checked with (1 and primes included)
PARTITION_COUNTS = [1, 2, 3, 6, 7, 12, 16, 100, 1024]


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
