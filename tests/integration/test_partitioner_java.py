"""reef.log.partitioner equals the real Java ``Utils.murmur2`` and
``BuiltInPartitioner.partitionForKey`` (it needs the jars of the local stack and ``java``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reef.log.partitioner import murmur2, partition_for
from tests.support.partition_keys import JAVA_MURMUR2, PARTITION_COUNTS, fixed_keys, seeded_keys

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
    from reef_dev.stack import kafka
    from reef_dev.stack.paths import load_settings

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
