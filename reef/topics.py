"""Topic names and which event types each carries (DESIGN.md section 1).

All event topics are co-partitioned (same partition count) and keyed by scenario,
so one worker owns all of a scenario's events.
"""

from __future__ import annotations

from typing import Final

SCENARIOS: Final = "reef.scenarios"
INFERENCE: Final = "reef.inference"
REPORTS: Final = "reef.reports"
SAMPLES: Final = "reef.samples"
RELEASE_PROPOSALS: Final = "reef.release-proposals"
RELEASES: Final = "reef.releases"
ENGINE: Final = "reef.engine"

TOPIC_EVENTS: Final[dict[str, tuple[str, ...]]] = {
    SCENARIOS: ("ScenarioCreated",),
    INFERENCE: ("InferenceRecorded",),
    REPORTS: ("ReportSubmitted",),
    SAMPLES: ("SampleJoined", "ReportRejected"),
    RELEASE_PROPOSALS: ("ReleaseProposed",),
    RELEASES: ("ReleaseCommitted", "ReleaseRejected"),
    ENGINE: ("EngineLoaded", "EngineLoadFailed"),
}

ALL_TOPICS: Final = tuple(TOPIC_EVENTS)

DEFAULT_PARTITIONS: Final = 6

#: the Faust app id of ``reef streams`` (also its consumer group and the prefix of its
#: changelog topics), before the deployment's topic prefix
STREAMS_APP_ID: Final = "reef-streams"


def topic_for(event_type: str) -> str:
    """The one topic an event type is written to."""
    for topic, types in TOPIC_EVENTS.items():
        if event_type in types:
            return topic
    raise KeyError(event_type)
