"""A minimal analytics consumer: aiokafka + fastavro + Reef's published schemas, nothing else.

    python docs/consumer.py --bootstrap 127.0.0.1:19092 --topic reef.inference --schemas schemas

Reef's values are Avro single-object encoded: C3 01, the 8-byte little-endian CRC-64-AVRO
fingerprint of the writer schema's canonical form, then the Avro body. Map fingerprints to
the .avsc files (current ones and schemas/history/) and decode with fastavro.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from pathlib import Path

import fastavro
from aiokafka import AIOKafkaConsumer
from fastavro.schema import fingerprint, to_parsing_canonical_form


def catalogue(folder: Path) -> dict[bytes, dict]:
    out = {}
    for path in [*folder.glob("*.avsc"), *folder.glob("history/*.avsc")]:
        raw = json.loads(path.read_text())
        key = bytes.fromhex(fingerprint(to_parsing_canonical_form(raw), "CRC-64-AVRO"))
        out[key] = fastavro.parse_schema(raw)
    return out


async def main(bootstrap: str, topic: str, schemas: Path, limit: int) -> None:
    writers = catalogue(schemas)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    try:
        seen = 0
        while seen < limit:
            batches = await consumer.getmany(timeout_ms=2000)
            if not batches:
                break
            for records in batches.values():
                for record in records:
                    value = record.value or b""
                    if value[:2] != b"\xc3\x01" or value[2:10] not in writers:
                        print(json.dumps({"offset": record.offset, "error": "not a known event"}))
                        continue
                    event = fastavro.schemaless_reader(io.BytesIO(value[10:]), writers[value[2:10]])
                    print(json.dumps({"offset": record.offset, "event": event}, default=str))
                    seen += 1
    finally:
        await consumer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="reef.inference")
    parser.add_argument("--schemas", type=Path, default=Path("schemas"))
    parser.add_argument("--limit", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.bootstrap, args.topic, args.schemas, args.limit))
