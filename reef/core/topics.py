"""Topic names and which event types each carries.

All event topics are co-partitioned (same partition count) and keyed by scenario,
so one worker owns all of a scenario's events.
"""

from __future__ import annotations

from typing import Final

SCENARIOS: Final = "reef.scenarios"
INFERENCE: Final = "reef.inference"
REPORTS: Final = "reef.reports"
SAMPLES: Final = "reef.samples"
#: agent turns bound to their next state, and sessions that expired (reef.core.sessions)
TURNS: Final = "reef.turns"
#: judgements of completed turns (reef.services.judge)
JUDGEMENTS: Final = "reef.judgements"
RELEASE_PROPOSALS: Final = "reef.release-proposals"
RELEASES: Final = "reef.releases"
ENGINE: Final = "reef.engine"
#: record id → data key (compacted; not an event topic: raw 32-byte values, tombstones)
KEYS: Final = "reef.keys"

TOPIC_EVENTS: Final[dict[str, tuple[str, ...]]] = {
    SCENARIOS: ("ScenarioCreated",),
    INFERENCE: ("InferenceRecorded", "RecordErased"),
    REPORTS: ("ReportSubmitted",),
    SAMPLES: ("SampleJoined", "ReportRejected"),
    TURNS: ("TurnCompleted", "SessionExpired"),
    JUDGEMENTS: ("TurnJudged",),
    RELEASE_PROPOSALS: ("ReleaseProposed",),
    RELEASES: ("ReleaseCommitted", "ReleaseRejected", "RolloutStarted", "RolloutDecided"),
    ENGINE: ("EngineLoaded", "EngineLoadFailed"),
}

ALL_TOPICS: Final = tuple(TOPIC_EVENTS)

#: topics whose records are raw key/value pairs where only the latest value per key
#: counts, and a ``None`` value (tombstone) deletes the key: Kafka compacts them, the
#: embedded log keeps them as a table with real deletes
COMPACTED_TOPICS: Final = frozenset({KEYS})

#: every topic a deployment creates: the event topics and the key topic
LOG_TOPICS: Final = (*ALL_TOPICS, KEYS)


def key_topic_configs(segment_ms: int) -> dict[str, str]:
    """Kafka configs of the key topic: compacted, and cleaned soon after a tombstone.

    ``segment.ms`` (and ``max.compaction.lag.ms``) roll the active segment so a
    superseded key becomes cleanable; ``min.cleanable.dirty.ratio`` near 0 lets one
    tombstone trigger a clean; ``file.delete.delay.ms`` removes the replaced segment
    files one second after the clean; tombstones themselves (record id only, no key
    bytes) are dropped after ``delete.retention.ms``.
    """
    return {
        "cleanup.policy": "compact",
        "segment.ms": str(segment_ms),
        "max.compaction.lag.ms": str(segment_ms),
        "min.compaction.lag.ms": "0",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": str(24 * 3600 * 1000),
        "file.delete.delay.ms": "1000",
    }


DEFAULT_PARTITIONS: Final = 6

#: the id of ``reef streams`` (its consumer group, the prefix of its transactional ids
#: and of its changelog topics), before the deployment's topic prefix
STREAMS_APP_ID: Final = "reef-streams"


def topic_for(event_type: str) -> str:
    """The one topic an event type is written to."""
    for topic, types in TOPIC_EVENTS.items():
        if event_type in types:
            return topic
    raise KeyError(event_type)
