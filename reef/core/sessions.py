"""Sessions: agent turns rebuilt from the exchanges alone, each bound to its next state.

Input ``reef.inference``; output ``reef.turns``. No report is needed: the signal that a
turn went well or badly is the next thing its session says (the user's reply, the tool's
result), so when turn N+1 of a session arrives, turn N is *bound* to it and a
:class:`TurnCompleted` names both receipts. A judge reads turn N's exchange and the next
state (the last message of turn N+1's request) from the sealed bodies through those
receipts; this processor never reads a body.

**What it reads.** Bodies are sealed and may be claim-checked, so matching runs on what
the API records beside them (:mod:`reef.core.fingerprints`): one keyed fingerprint per
request message (``<role>:<hmac>``), the answer's fingerprint, whether tool schemas were
offered, and the exchange's ``tags``: the client's ``x-reef-tag-*`` headers over the
agent CLI's own session headers (:mod:`reef.core.agent_headers`: ``session``, with
``session-source`` when the agent named it, ``thread``, ``parent-thread``) and the side
call the API recognised by its shape (:mod:`reef.core.side_calls`: ``turn-type: side``,
``side-kind``; ``history: compacted`` for a history that says it was summarised).
Records without fingerprints (written before they existed, or while the deployment did
not track sessions) can join tagged sessions only.

**Rules**, per complete exchange, in order:

1. a receipt seen before is a no-op (its fate is remembered: redelivery yields nothing);
2. shadow copies and side calls never become turns. A shadow copy (``shadow_of``:
   reef.core.shadow) is not even a clock tick: its client saw the head's answer, which
   is the session's turn. A side call (its fate ``{"side": kind}``) is a
   ``count_tokens`` exchange, a request tagged ``turn-type: side`` (kind: its
   ``side-kind``, e.g. ``compaction``, ``title``, ``quota``), or, not forced ``main``, a
   request that offers no tool schemas outside a session its client named (untagged,
   or in a session named by the agent's headers);
3. tagged path, a session its client named (``x-reef-tag-session``, no ``thread``):
   turns bind in arrival order; a request whose fingerprints equal the session's last
   request is a client retry and ignored (the first receipt keeps the slot);
4. tagged path, a session the agent named (``session-source``) or one whose requests
   name their ``thread``: a session holds the agent's conversation and the subagents'
   conversations it spawned, each a session of its own, bound in its own order. A
   request belongs to the conversation its ``thread`` names; unnamed, to the one whose
   last request it equals (a retry) or extends (by an ``assistant`` message and more),
   else, unless tagged ``subagent`` (the agent marks its subagents' requests), to the
   agent's own conversation if it opens with the same first message (the system prompt)
   or is tagged ``history: compacted`` (a compacted history, summarised, goes on in the
   same session), else it opens a subagent's session. A subagent's
   session records its parent: the spawning conversation (``parent-thread``, else the
   agent's own) and that conversation's last turn when the subagent's first request
   arrives, the one whose answer called it unless the parent went on first
   (``parent_session_id``, ``parent_receipt_id`` on its events);
5. untagged path: a request whose fingerprints equal an open session's last request is
   a retry (ignored); one that strictly extends a session's last request by at least two
   messages, with an ``assistant`` message right after that prefix, is that session's
   next turn (among several, the one whose recorded answer is that assistant message,
   then the most recently active); no match opens a session;
6. on a match the session's previous turn is bound: ``TurnCompleted`` (its event id
   derived from the two receipts, so a re-run emits the same id) with the next state's
   role (``user`` reply or ``tool`` result); an erased previous turn is not emitted.

**Expiry, in event time.** Before an input is applied, the scenario's clock moves to
its event time (never backwards) and sessions idle for longer than ``session_ttl`` end;
opening a session beyond ``max_open_sessions`` ends the least recently active. Either
way a :class:`SessionExpired` names the last turn, which never gets a next state and
never trains. A subagent's session ends the same way, on its own; once the agent's own
session ended, its subagents are reached no more. Event time, not wall time, so ``reef
replay`` reproduces every decision.

**State** (per scenario, JSON values): ``fate/<receipt>`` (session and turn index, or
``{"side": kind}``/``retry``/``unmatched``), ``session/<scenario>/<id>`` (last receipt
and fingerprint key, activity, its place in a least-recently-active list; a tagged
session its first fingerprint and its subagents' sessions, a subagent's its parent),
``open/<scenario>`` (that list's ends, the count, the clock), ``tag/<scenario>/<tag>``
and ``last/<scenario>/<key>`` (the open untagged sessions whose last request has that
fingerprint key). Every step touches O(messages) keys, whatever the number of sessions;
an agent's session record grows with its open subagents' sessions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from reef.core import topics
from reef.core.agent_headers import SESSION_SOURCE_TAG, SUBAGENT_TAG
from reef.core.events import (
    Event,
    InferenceRecorded,
    RecordErased,
    SessionExpired,
    TurnCompleted,
)
from reef.core.fingerprints import role_of
from reef.core.ids import derived_id
from reef.core.side_calls import HISTORY_TAG, SIDE_KIND_TAG, TURN_TYPE_TAG
from reef.core.state import KeyValueState

PRODUCER = "reef-sessions"
SESSION_TAG = "session"
THREAD_TAG = "thread"
PARENT_THREAD_TAG = "parent-thread"
NOT_TURNS = frozenset({"/v1/messages/count_tokens"})
#: what :meth:`SessionProcessor._conversation` answers for a client retry
RETRY: Final = "\x00retry"


@dataclass(frozen=True, slots=True)
class SessionSettings:
    session_ttl: timedelta = timedelta(seconds=900)
    max_open_sessions: int = 4096


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def chain_keys(fingerprints: list[str]) -> list[str]:
    """``keys[k]`` identifies the first ``k`` messages (a hash chain: one pass for all)."""
    keys = [hashlib.sha256(b"reef-transcript").hexdigest()[:32]]
    for fp in fingerprints:
        keys.append(hashlib.sha256(f"{keys[-1]}|{fp}".encode()).hexdigest()[:32])
    return keys


def side_kind(event: InferenceRecorded) -> str | None:
    """The kind of side call the exchange is (rule 2); None: a turn."""
    tags = event.tags
    turn_type = tags.get(TURN_TYPE_TAG)
    if event.route in NOT_TURNS:
        return "count_tokens"
    if turn_type == "side":
        return tags.get(SIDE_KIND_TAG) or "tagged"
    if turn_type == "main" or event.has_tools is not False:
        return None
    client_named = SESSION_TAG in tags and SESSION_SOURCE_TAG not in tags
    return None if client_named else "no-tools"


def _threaded(tags: dict[str, str]) -> bool:
    """Whether a tagged session holds several conversations (rule 4)."""
    return SESSION_SOURCE_TAG in tags or THREAD_TAG in tags


class SessionProcessor:
    name = "sessions"
    inputs = (topics.INFERENCE,)
    output = topics.TURNS

    def __init__(self, settings: SessionSettings | None = None) -> None:
        self.settings = settings or SessionSettings()

    def step(self, state: KeyValueState, event: Event) -> list[Event]:
        if isinstance(event, InferenceRecorded):
            if not event.complete or event.shadow_of is not None:
                return []  # a shadow copy answered no one: no session's turn, no clock
            if state.get(f"fate/{event.event_id}") is not None:
                return []
            outputs = self._expire_idle(state, event.scenario, event.occurred_at)
            return outputs + self._recorded(state, event)
        if isinstance(event, RecordErased):
            outputs = self._expire_idle(state, event.scenario, event.occurred_at)
            fate = state.get(f"fate/{event.record_id}")
            if isinstance(fate, dict) and not fate.get("erased"):
                state.set(f"fate/{event.record_id}", {**fate, "erased": True})
            return outputs
        return []

    # -- one exchange ------------------------------------------------------------------

    def _recorded(self, state: KeyValueState, event: InferenceRecorded) -> list[Event]:
        fate_key = f"fate/{event.event_id}"
        kind = side_kind(event)
        if kind is not None:
            state.set(fate_key, {"side": kind})
            return []
        fps = event.message_fingerprints
        keys = chain_keys(fps) if fps is not None else None
        tag = event.tags.get(SESSION_TAG)
        if tag is not None:
            return self._tagged(state, event, tag, keys)
        if fps is None or keys is None:
            state.set(fate_key, "unmatched")  # nothing to match on: an old record
            return []
        if state.get(f"last/{event.scenario}/{keys[-1]}"):
            state.set(fate_key, "retry")
            return []
        sid = self._match(state, event.scenario, fps, keys)
        if sid is None:
            return self._open(state, event, keys, None)
        return self._bind(state, event, sid, keys, "transcript")

    def _tagged(
        self, state: KeyValueState, event: InferenceRecorded, tag: str, keys: list[str] | None
    ) -> list[Event]:
        """Rules 3 and 4: the session a tag names, and in it the conversation."""
        scenario = event.scenario
        root_sid = state.get(f"tag/{scenario}/{tag}")
        if root_sid is None:
            fps = event.message_fingerprints
            first: dict[str, Any] = {"first": fps[0] if fps else None, "subs": {}, "names": {}}
            return self._open(state, event, keys, tag, {**first, "thread": _thread(event)})
        root = state.get(f"session/{scenario}/{root_sid}")
        if _threaded(event.tags):
            sid = self._conversation(root_sid, root, event, keys)
        else:
            sid = RETRY if keys is not None and root["key"] == keys[-1] else root_sid
        if sid == RETRY:
            state.set(f"fate/{event.event_id}", "retry")
            return []
        if sid is None:
            return self._open_subagent(state, event, keys, root_sid, root)
        outputs = self._bind(state, event, sid, keys, "tag")
        if sid != root_sid:
            self._register(state, scenario, root_sid, sid, keys, None)
        return outputs

    def _conversation(
        self,
        root_sid: str,
        root: dict[str, Any],
        event: InferenceRecorded,
        keys: list[str] | None,
    ) -> str | None:
        """The session (the agent's own or a subagent's) a request continues, RETRY, or
        None for a subagent's first request (rule 4)."""
        last: dict[str, str | None] = {root_sid: root["key"], **(root.get("subs") or {})}
        name = _thread(event)
        if name is not None:
            names: dict[str, str] = root.get("names") or {}
            named = root_sid if name == root.get("thread") else names.get(name)
            same = named is not None and keys is not None and last.get(named) == keys[-1]
            return RETRY if same else named
        if keys is None:
            return root_sid  # nothing to tell conversations apart by: arrival order
        by_key = {key: sid for sid, key in last.items() if key is not None}
        if keys[-1] in by_key:
            return RETRY
        fps = event.message_fingerprints or []
        for k in range(len(fps) - 2, 0, -1):
            if role_of(fps[k]) == "assistant" and keys[k] in by_key:
                return by_key[keys[k]]
        if SUBAGENT_TAG in event.tags:
            return None  # the agent says it is a subagent's: never its own conversation
        if event.tags.get(HISTORY_TAG) == "compacted" or (fps and fps[0] == root.get("first")):
            return root_sid
        return None

    def _open_subagent(
        self,
        state: KeyValueState,
        event: InferenceRecorded,
        keys: list[str] | None,
        root_sid: str,
        root: dict[str, Any],
    ) -> list[Event]:
        """A subagent's first request: its own session, linked to the turn that spawned it."""
        scenario, sid = event.scenario, event.event_id
        parent_name = event.tags.get(PARENT_THREAD_TAG)
        parent_sid = root_sid
        if parent_name is not None and parent_name != root.get("thread"):
            parent_sid = root.get("names", {}).get(parent_name, root_sid)
        parent = state.get(f"session/{scenario}/{parent_sid}")
        self._register(state, scenario, root_sid, sid, keys, _thread(event))
        link = {"root": root_sid, "parent_session": parent_sid, "parent": parent["last"]}
        return self._open(state, event, keys, root["tag"], link)

    def _register(
        self,
        state: KeyValueState,
        scenario: str,
        root_sid: str,
        sid: str,
        keys: list[str] | None,
        name: str | None,
    ) -> None:
        """Note a subagent's session (and its last request) in the agent's session."""
        key = f"session/{scenario}/{root_sid}"
        root = state.get(key)
        if root is None:
            return  # the agent's session ended: the subagent's goes on alone
        subs = {**(root.get("subs") or {}), sid: None if keys is None else keys[-1]}
        names = dict(root.get("names") or {})
        if name is not None:
            names[name] = sid
        state.set(key, {**root, "subs": subs, "names": names})

    # -- untagged: the transcript ------------------------------------------------------

    def _match(
        self, state: KeyValueState, scenario: str, fps: list[str], keys: list[str]
    ) -> str | None:
        """The open untagged session this request continues (rule 5), if any."""
        best: tuple[bool, int, str] | None = None
        for k in range(len(fps) - 2, 0, -1):
            if role_of(fps[k]) != "assistant":
                continue
            for sid in state.get(f"last/{scenario}/{keys[k]}") or []:
                session = state.get(f"session/{scenario}/{sid}")
                rank = (session["answer"] == fps[k], session["seq"], sid)
                if best is None or rank > best:
                    best = rank
        return None if best is None else best[2]

    def _open(
        self,
        state: KeyValueState,
        event: InferenceRecorded,
        keys: list[str] | None,
        tag: str | None,
        extra: dict[str, Any] | None = None,
    ) -> list[Event]:
        """A new session, its first turn this exchange (``extra``: the tagged fields)."""
        scenario, sid = event.scenario, event.event_id
        meta = self._meta(state, scenario)
        session = {
            "tag": tag,
            "last": sid,
            "turns": 1,
            "key": None if keys is None else keys[-1],
            "answer": event.answer_fingerprint,
            "release": event.served_release_id or event.release_id,
            "at": _ms(event.occurred_at),
            "seq": meta["seq"] + 1,
            "prev": meta["newest"],
            "next": None,
            **(extra or {}),
        }
        state.set(f"session/{scenario}/{sid}", session)
        if meta["newest"] is not None:
            self._link(state, scenario, meta["newest"], "next", sid)
        meta.update(newest=sid, seq=meta["seq"] + 1, count=meta["count"] + 1)
        if meta["oldest"] is None:
            meta["oldest"] = sid
        state.set(f"open/{scenario}", meta)
        if tag is not None:
            if "root" not in session:  # a subagent's session is found through its agent's
                state.set(f"tag/{scenario}/{tag}", sid)
        elif session["key"] is not None:
            self._index(state, scenario, session["key"], sid, add=True)
        state.set(f"fate/{sid}", {"session": sid, "turn": 0})
        outputs: list[Event] = []
        while meta["count"] > self.settings.max_open_sessions:
            outputs.append(self._end(state, scenario, meta["oldest"], "evicted", event.occurred_at))
            meta = self._meta(state, scenario)
        return outputs

    def _bind(
        self,
        state: KeyValueState,
        event: InferenceRecorded,
        sid: str,
        keys: list[str] | None,
        matched_by: str,
    ) -> list[Event]:
        scenario, receipt = event.scenario, event.event_id
        session = self._unlink(state, scenario, sid)
        previous = session["last"]
        turn = session["turns"] - 1
        fps = event.message_fingerprints
        outputs: list[Event] = []
        prev_fate = state.get(f"fate/{previous}")
        if not (isinstance(prev_fate, dict) and prev_fate.get("erased")):
            outputs.append(
                TurnCompleted(
                    event_id=derived_id("turn-completed", scenario, previous, receipt),
                    scenario=scenario,
                    occurred_at=event.occurred_at,
                    producer=PRODUCER,
                    session_id=sid,
                    turn_index=turn,
                    receipt_id=previous,
                    next_receipt_id=receipt,
                    release_id=session["release"],
                    matched_by=matched_by,
                    session_tag=session["tag"],
                    next_state_role=role_of(fps[-1]) if fps else None,
                    parent_session_id=session.get("parent_session"),
                    parent_receipt_id=session.get("parent"),
                )
            )
        if session["tag"] is None and session["key"] is not None:
            self._index(state, scenario, session["key"], sid, add=False)
        meta = self._meta(state, scenario)
        session.update(
            last=receipt,
            turns=turn + 2,
            key=None if keys is None else keys[-1],
            answer=event.answer_fingerprint,
            release=event.served_release_id or event.release_id,
            at=_ms(event.occurred_at),
            seq=meta["seq"] + 1,
            prev=meta["newest"],
            next=None,
        )
        state.set(f"session/{scenario}/{sid}", session)
        if meta["newest"] is not None:
            self._link(state, scenario, meta["newest"], "next", sid)
        meta.update(newest=sid, seq=meta["seq"] + 1, count=meta["count"] + 1)
        if meta["oldest"] is None:
            meta["oldest"] = sid
        state.set(f"open/{scenario}", meta)
        if session["tag"] is None and session["key"] is not None:
            self._index(state, scenario, session["key"], sid, add=True)
        state.set(f"fate/{receipt}", {"session": sid, "turn": turn + 1})
        return outputs

    # -- expiry ------------------------------------------------------------------------

    def _expire_idle(self, state: KeyValueState, scenario: str, at: datetime) -> list[Event]:
        meta = self._meta(state, scenario)
        now = max(meta["clock"], _ms(at))
        if now != meta["clock"]:
            meta["clock"] = now
            state.set(f"open/{scenario}", meta)
        horizon = now - int(self.settings.session_ttl.total_seconds() * 1000)
        outputs: list[Event] = []
        while meta["oldest"] is not None:
            oldest = state.get(f"session/{scenario}/{meta['oldest']}")
            if oldest["at"] >= horizon:
                break
            outputs.append(self._end(state, scenario, meta["oldest"], "idle", at))
            meta = self._meta(state, scenario)
        return outputs

    def _end(
        self, state: KeyValueState, scenario: str, sid: str, reason: str, at: datetime
    ) -> Event:
        session = self._unlink(state, scenario, sid)
        state.delete(f"session/{scenario}/{sid}")
        if session.get("root") is not None:
            self._forget(state, scenario, session["root"], sid)
        elif session["tag"] is not None:
            state.delete(f"tag/{scenario}/{session['tag']}")
        elif session["key"] is not None:
            self._index(state, scenario, session["key"], sid, add=False)
        return SessionExpired(
            event_id=derived_id("session-expired", scenario, sid, session["last"]),
            scenario=scenario,
            occurred_at=at,
            producer=PRODUCER,
            session_id=sid,
            last_receipt_id=session["last"],
            turns=session["turns"],
            reason=reason,
            session_tag=session["tag"],
            parent_session_id=session.get("parent_session"),
            parent_receipt_id=session.get("parent"),
        )

    def _forget(self, state: KeyValueState, scenario: str, root_sid: str, sid: str) -> None:
        """An ended subagent's session leaves its agent's session (if that is still open)."""
        key = f"session/{scenario}/{root_sid}"
        root = state.get(key)
        if root is None:
            return
        subs = {s: k for s, k in (root.get("subs") or {}).items() if s != sid}
        names = {n: s for n, s in (root.get("names") or {}).items() if s != sid}
        state.set(key, {**root, "subs": subs, "names": names})

    # -- the least-recently-active list and the transcript index ------------------------

    def _meta(self, state: KeyValueState, scenario: str) -> dict[str, Any]:
        meta = state.get(f"open/{scenario}")
        if meta is None:
            return {"oldest": None, "newest": None, "count": 0, "seq": 0, "clock": 0}
        return dict(meta)

    def _unlink(self, state: KeyValueState, scenario: str, sid: str) -> dict[str, Any]:
        """Take the session out of the activity list (its record is returned, updated)."""
        session = dict(state.get(f"session/{scenario}/{sid}"))
        meta = self._meta(state, scenario)
        prev, nxt = session["prev"], session["next"]
        if prev is None:
            meta["oldest"] = nxt
        else:
            self._link(state, scenario, prev, "next", nxt)
        if nxt is None:
            meta["newest"] = prev
        else:
            self._link(state, scenario, nxt, "prev", prev)
        meta["count"] -= 1
        state.set(f"open/{scenario}", meta)
        session.update(prev=None, next=None)
        state.set(f"session/{scenario}/{sid}", session)
        return session

    def _link(
        self, state: KeyValueState, scenario: str, sid: str, side: str, other: str | None
    ) -> None:
        key = f"session/{scenario}/{sid}"
        state.set(key, {**state.get(key), side: other})

    def _index(self, state: KeyValueState, scenario: str, key: str, sid: str, *, add: bool) -> None:
        slot = f"last/{scenario}/{key}"
        sids = [s for s in state.get(slot) or [] if s != sid]
        if add:
            sids.append(sid)
        if sids:
            state.set(slot, sids)
        else:
            state.delete(slot)


def _thread(event: InferenceRecorded) -> str | None:
    return event.tags.get(THREAD_TAG)
