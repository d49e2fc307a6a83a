"""The join's decision methods in their plain form (every key read where it is needed,
no shared walk), as a subclass: the oracle the equivalence test runs beside
:class:`reef.core.join.JoinProcessor`, asserting equal outputs and state."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from reef.core.events import Event, SampleJoined
from reef.core.ids import derived_id, scenario_tag
from reef.core.join import PRODUCER, JoinProcessor, _at, _ms, _rejected, _store_parked
from reef.core.state import KeyValueState


class ReferenceJoin(JoinProcessor):
    """Reads every key as often as the plain step needs it and orders trajectories its way."""

    def reads(self, event: Event) -> list[str]:
        return []

    def _decide(self, state: KeyValueState, report: dict[str, Any], now: datetime) -> list[Event]:
        scenario = report["scenario"]
        refs = report["references"]
        reason = self._invalid(state, scenario, refs)
        if reason is not None:
            return [self._reject(state, report, reason, now)]
        missing = [r for r in refs if state.get(f"rec/{r}") is None]
        if missing:
            return self._park(state, report, now)
        if any(state.get(f"rec/{r}")["scenario"] != scenario for r in refs):
            # the tag is 32 bits of a hash: a name crafted to collide must not cross over
            detail = "a referenced record belongs to another scenario"
            return [self._reject(state, report, "foreign_reference", now, detail)]
        return [self._old_join(state, report, now)]

    def _invalid(self, state: KeyValueState, scenario: str, refs: list[str]) -> str | None:
        if not refs:
            return "no_references"
        tag = scenario_tag(scenario)
        if any(not r.startswith(tag) for r in refs):
            return "foreign_reference"
        if len(set(refs)) != len(refs):
            return "duplicate_reference"
        if any(state.get(f"erased/{r}") is not None for r in refs):
            return "erased"
        if any(state.get(f"consumed/{r}") is not None for r in refs):
            return "already_consumed"
        return None

    def _park(self, state: KeyValueState, report: dict[str, Any], now: datetime) -> list[Event]:
        key = f"parked/{report['scenario']}"
        parked = list(state.get(key) or [])
        if len(parked) >= self.settings.max_parked:
            return [
                self._reject(state, report, "unknown_reference", now, "too many reports waiting")
            ]
        report["deadline"] = _ms(now + self.settings.park_timeout)
        parked.append(report)
        state.set(key, parked)
        return []

    def _retry_parked(self, state: KeyValueState, scenario: str) -> list[Event]:
        key = f"parked/{scenario}"
        parked = list(state.get(key) or [])
        ready = [
            p for p in parked if all(state.get(f"rec/{r}") is not None for r in p["references"])
        ]
        if not ready:
            return []
        _store_parked(state, key, [p for p in parked if p not in ready])
        outputs: list[Event] = []
        for report in ready:
            outputs.extend(self._decide(state, report, _at(report["at"])))
        return outputs

    def _expire(self, state: KeyValueState, scenario: str, now: datetime) -> list[Event]:
        key = f"parked/{scenario}"
        parked = state.get(key)
        if not parked:
            return []
        deadline = _ms(now)
        expired = [p for p in parked if p["deadline"] < deadline]
        if not expired:
            return []
        _store_parked(state, key, [p for p in parked if p not in expired])
        return [
            self._reject(state, p, "unknown_reference", now, "referenced record never arrived")
            for p in expired
        ]

    def _reject(
        self,
        state: KeyValueState,
        report: dict[str, Any],
        reason: str,
        now: datetime,
        detail: str | None = None,
    ) -> Event:
        state.set(
            f"report/{report['scenario']}/{report['id']}",
            {"hash": report["hash"], "fate": "rejected"},
        )
        return _rejected(report["scenario"], report["id"], report["hash"], reason, detail, now)

    def _old_join(self, state: KeyValueState, report: dict[str, Any], now: datetime) -> Event:
        receipts = self._old_trajectory(state, report["references"])
        records = [state.get(f"rec/{r}") for r in receipts]
        for receipt in receipts:
            state.set(f"consumed/{receipt}", report["id"])
        state.set(
            f"report/{report['scenario']}/{report['id']}",
            {"hash": report["hash"], "fate": "accepted"},
        )
        releases = list(dict.fromkeys(rec["release_id"] for rec in records))
        trajectory = [
            {
                "receipt": r,
                "release_id": rec["release_id"],
                "route": rec["route"],
                "request": rec["request"],
                "response": rec["response"],
            }
            for r, rec in zip(receipts, records, strict=True)
        ]
        return SampleJoined(
            event_id=derived_id("sample", report["scenario"], report["id"], report["hash"]),
            scenario=report["scenario"],
            occurred_at=now,
            producer=PRODUCER,
            report_id=report["id"],
            references=receipts,
            trajectory_json=json.dumps(trajectory),
            score=report["score"],
            feedback_json=report["feedback"],
            metadata_json=report["metadata"],
            release_ids=releases,
            reporter=report.get("reporter"),
        )

    def _old_trajectory(self, state: KeyValueState, refs: list[str]) -> list[str]:
        """The referenced receipts plus (when merging) their unconsumed earlier turns."""
        chosen: dict[str, int] = {}
        for ref in refs:
            receipt: str | None = ref
            while receipt is not None and receipt not in chosen:
                record = state.get(f"rec/{receipt}")
                if record is None or (receipt != ref and state.get(f"consumed/{receipt}")):
                    break
                chosen[receipt] = record["at"]
                receipt = record["parent"] if self.settings.merge_sessions else None
        order = {r: i for i, r in enumerate(refs)}
        return sorted(chosen, key=lambda r: (chosen[r], order.get(r, -1)))
