"""Reading Reef's events from your own program: with Reef's library, or with nothing of Reef.

With Reef installed, ``reef.history`` reads either log with the deployment's settings: sealed
bodies opened with their keys from ``reef.keys``, erased records marked ``"erased": true``
(their content None), claim-checked bodies fetched from the artifact store::

    REEF_LOG=kafka REEF_KAFKA_BOOTSTRAP=127.0.0.1:19092 python docs/consumer.py --limit 5
    REEF_STATE_DIR=.reef python docs/consumer.py --topic reef.samples --limit 5

Without Reef: aiokafka + fastavro + Reef's published ``schemas/`` (Kafka only; bodies stay
sealed, which needs the key topic and AES-GCM to open: use the library for that)::

    python docs/consumer.py --schemas schemas --bootstrap 127.0.0.1:19092 --topic reef.inference

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

# -- with Reef: reef.history ------------------------------------------------------------------


async def with_reef(topic: str, limit: int, config: Path | None) -> None:
    from dataclasses import asdict

    from reef.history import open_stream
    from reef.settings import load_settings

    settings = load_settings(config_file=config).settings  # REEF_* variables, like reef serve
    async with open_stream(settings, topic, undecodable="skip") as stream:
        seen = 0
        async for record in stream:
            line = {
                "offset": record.offset,
                "type": record.event.type_name(),
                "erased": record.erased,
                "event": asdict(record.event),
            }
            print(json.dumps(line, default=str))
            seen += 1
            if seen == limit:
                break
    for skipped in stream.skipped:
        print(json.dumps({"offset": skipped.offset, "error": skipped.reason}))


# -- without Reef: aiokafka + fastavro + schemas/ ----------------------------------------------


def catalogue(folder: Path) -> dict[bytes, dict]:
    out = {}
    for path in [*folder.glob("*.avsc"), *folder.glob("history/*.avsc")]:
        raw = json.loads(path.read_text())
        key = bytes.fromhex(fingerprint(to_parsing_canonical_form(raw), "CRC-64-AVRO"))
        out[key] = fastavro.parse_schema(raw)
    return out


async def without_reef(bootstrap: str, topic: str, schemas: Path, limit: int) -> None:
    writers = catalogue(schemas)
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
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
    parser.add_argument("--topic", default="reef.inference")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--config", type=Path, help="with Reef: a reef config file")
    parser.add_argument("--schemas", type=Path, help="without Reef: the schemas/ folder")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="without Reef: Kafka")
    args = parser.parse_args()
    if args.schemas is not None:
        asyncio.run(without_reef(args.bootstrap, args.topic, args.schemas, args.limit))
    else:
        asyncio.run(with_reef(args.topic, args.limit, args.config))
