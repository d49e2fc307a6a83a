"""Reading Reef's history: decoded, readable events from either log, as records or Arrow.

The one public reading API, for analytics and for Reef's own tools (``reef export``)::

    from reef.settings import load_settings
    from reef.history import open_stream, read_tables, to_arrow

    settings = load_settings().settings          # REEF_LOG, REEF_STATE_DIR, ... as for serve
    async with open_stream(settings, ["reef.inference"], since=monday) as stream:
        async for record in stream:              # StreamRecord
            record.topic, record.partition, record.offset, record.event, record.erased

    tables = await read_tables(settings, ["reef.inference", "reef.samples"])  # pyarrow

:func:`open_stream` assembles a reader from the settings, like the deployment's own
processes do: the log (:func:`reef.log.open_log`), the key ring that reads ``reef.keys``
(:func:`reef.crypto.rings.open_keyring`) and the artifact store
(:func:`reef.artifacts.open_store`) for claim-checked bodies. A caller that already
holds an :class:`~reef.services.eventstore.EventStore` (opened with
:func:`readable_store`) builds an :class:`EventStream` on it directly. Decoding and
opening are the event store's (:meth:`EventStore.read`, :meth:`EventStore.open`); this
package decides what a reader of the history gets:

- **Sealed content** is opened with the record's data key: exchange bodies, the trajectory
  copies in samples, the judge's hints in judgements, computed reports and samples.
- **Erased** (a data key is gone): the record is yielded with ``erased=True`` and the
  content that key sealed set to None (an exchange keeps its metadata: route, model,
  token counts, release; a sample its ids, references, score and releases, with the
  erased turns' bodies None and ``"erased": true`` in the trajectory). Never an error:
  erasure is a normal fact of the history.
- **A claim-checked body whose object cannot be fetched** (missing, or corrupt in the
  artifact store): the record is yielded with that body None, its ``*_ref`` kept, and
  ``unavailable`` saying why. The rest of the record is still true, so analytics keep
  the row.
- **An undecodable record** (not Reef's single-object Avro, a schema fingerprint this
  Reef does not know, e.g. written by a newer release, or a sealed blob that does not
  open with its key: tampered): :class:`UndecodableRecordError` by default, naming
  topic, partition and offset, because a silently shorter table gives wrong figures.
  With ``undecodable="skip"`` it is passed over and listed in ``stream.skipped``
  (``reef export`` skips and reports the count: a record in the immutable log cannot be
  fixed, and one must not make a topic unexportable forever).

:mod:`reef.history.arrow` turns records into tables (``to_arrow``, ``arrow_batches``,
``read_tables``) with a fixed schema per topic; :mod:`reef.history.export` is what
``reef export`` writes. ``docs/consumer.py`` and ``docs/analytics.py`` are worked
examples. Importing this package loads neither pyarrow nor the server (FastAPI, the
trainers, the engine): ``tests/architecture/test_history_library.py`` holds it to that.
"""

from __future__ import annotations

from reef.history.arrow import arrow_batches, columns, read_tables, schema, to_arrow
from reef.history.reader import (
    EventStream,
    SkippedRecord,
    StreamRecord,
    UndecodableRecordError,
    open_stream,
    readable_store,
)

__all__ = [
    "EventStream",
    "SkippedRecord",
    "StreamRecord",
    "UndecodableRecordError",
    "arrow_batches",
    "columns",
    "open_stream",
    "read_tables",
    "readable_store",
    "schema",
    "to_arrow",
]
