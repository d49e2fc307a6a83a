"""Where exchanges' bodies are sealed and assembled: whole, or as blocks shared in a session.

**Writing** (:meth:`BodyStore.seal`, format ``blocks``). A request is cut into blocks
(:mod:`reef.crypto.blocks`); each block is looked up in its **scope** (one agent session:
:func:`scope_of`) among the blocks earlier records of that scope introduced. The blocks
no earlier record holds are this record's **pack**: compressed, sealed under this
record's data key (associated data part ``blocks``) and stored in the artifact store
before the record is appended, like a claim-checked body. The record seals a manifest
instead of its request. Steps, in order:

1. when the request arrives (:meth:`BodyStore.prepare`, while the upstream answers; at
   the append otherwise): choose the record's data key, split the request (a body in no
   known serialization style is sealed whole), address its blocks (:class:`RecentBlocks`:
   a block the scope's previous request had in the same place is compared, not hashed),
   look each one up in the scope's index (this process's memory), store the pending
   answer packs of earlier records it repeats, then seal and store the pack of its new
   blocks (the object exists before any reference);
2. at the append: seal the manifest; the blocks of the answer the agent will resend
   (:func:`reef.crypto.blocks.answer`) belong to this record too: in its pack when it
   was sealed at the append, else sealed under its key as a pending pack (memory);
3. the caller appends the record and its key in one batch;
4. only once that append is acknowledged are the new blocks (and the pending answer
   pack) added to the index (:meth:`BodyStore.commit`): a later record never
   references a pack whose key might not be durable, nor a pending pack before the
   request repeating it has stored it (step 1). A crash after 1 leaves a sealed pack
   nobody references; a pending answer pack lost with its process only means a later
   record introduces that answer itself.

The index lives in one process: a session served by two API replicas, or across a
restart, has its blocks introduced again by the first record each process writes (stored
twice, each copy erased with its own record). :meth:`BodyStore.forget` drops an erased
record's blocks from the index, so later records introduce them again, readable.

**Reading** (:meth:`BodyStore.open_exchange`, :meth:`BodyStore.open_trajectory`). A
manifest is assembled from its packs, each opened with its owner's key; a pack whose
owner was erased (no key) or whose object is gone stands for :data:`~reef.crypto.blocks.ERASED`
markers, and the body reads as partly erased (``complete`` False).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from reef.artifacts.claimcheck import ClaimCheck, ref_for
from reef.artifacts.errors import ArtifactError
from reef.core.events import InferenceRecorded
from reef.crypto import blocks
from reef.crypto.bodies import (
    Content,
    OpenedBody,
    loaded_trajectory,
    open_parts,
    open_trajectory_contents,
    seal_exchange,
    with_bodies,
)
from reef.crypto.envelope import Manifest, compress, decompress, wrap_manifest
from reef.crypto.keyring import KeyRing
from reef.crypto.seal import body_aad, new_data_key, open_sealed, seal

#: how sealed bodies are written: see :mod:`reef.crypto.envelope` and docs/storage.md
BodyFormat = Literal["blocks", "compressed", "plain"]
PACK = "blocks"
Scope = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PendingPack:
    """An answer's blocks sealed under its record's key, not stored yet: the first
    request that repeats one stores it, then references it."""

    sealed: bytes
    blocks: dict[bytes, blocks.Located]


@dataclass(frozen=True, slots=True)
class Staged:
    """The blocks a sealed record introduces, added to the index once it is appended."""

    scope: Scope
    blocks: dict[bytes, blocks.Located]
    answer: PendingPack | None = None


@dataclass(frozen=True, slots=True)
class _Draft:
    """What a record's request is known by before the record exists."""

    scenario: str
    receipt: str
    tags: Mapping[str, str]
    request: str
    #: the request as the caller parsed it (a hint: :func:`reef.crypto.blocks.split`)
    parsed: blocks.Parsed | None = None


@dataclass(frozen=True, slots=True)
class _Planned:
    """A request split, its new blocks' pack stored under ``key``."""

    draft: _Draft
    key: bytes
    scope: Scope
    parts: blocks.Split
    located: dict[str, list[blocks.Located]]
    mine: dict[bytes, blocks.Located]


def scope_of(scenario: str, tags: Mapping[str, str], parts: blocks.Split) -> Scope:
    """The session whose records share blocks: the session tag (``x-reef-tag-session``,
    or the agent's own session header), else the request's end-user id (``metadata``'s
    ``user_id``, OpenAI's ``user``), else the conversation's first message and system
    prompt (sessions that begin alike share it)."""
    session = tags.get("session")
    if session:
        return scenario, f"tag:{session}"
    metadata = parts.template.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    user = user or parts.template.get("user")
    if isinstance(user, str) and user:
        return scenario, f"user:{user}"
    roots = [
        parts.fields[name][0].block
        for name in ("system", "instructions", "messages", "input")
        if parts.fields.get(name)
    ]
    return scenario, "root:" + blocks.digest(b"\n".join(roots)).hex()


def _looked_up(
    known: Mapping[bytes, blocks.Located], every: Sequence[tuple[bytes, bytes]]
) -> tuple[dict[bytes, blocks.Located], list[bytes], dict[bytes, int]]:
    """(where the index has each known block, then the blocks it lacks in order, and
    each lacking address's index among them): ``every`` is ``(block, address)`` pairs."""
    found: dict[bytes, blocks.Located] = {}
    new: list[bytes] = []
    fresh: dict[bytes, int] = {}
    for block, address in every:
        if address in found or address in fresh:
            continue
        where = known.get(address)
        if where is not None:
            found[address] = where
        else:
            fresh[address] = len(new)
            new.append(block)
    return found, new, fresh


class BlockIndex:
    """Per scope, where each block lives (this process's memory; the least recently
    used scopes are dropped beyond ``max_scopes``)."""

    def __init__(self, max_scopes: int = 4096) -> None:
        self.max_scopes = max_scopes
        self._scopes: OrderedDict[Scope, dict[bytes, blocks.Located]] = OrderedDict()
        #: the scopes holding blocks each record introduced (erasure forgets them)
        self._owners: dict[str, set[Scope]] = {}
        #: per scope, answer blocks whose pack is not stored yet
        self._pending: dict[Scope, dict[bytes, PendingPack]] = {}

    def get(self, scope: Scope) -> Mapping[bytes, blocks.Located]:
        found = self._scopes.get(scope)
        if found is None:
            return {}
        self._scopes.move_to_end(scope)
        return found

    def add(self, staged: Staged) -> None:
        held = self._scopes.setdefault(staged.scope, {})
        self._scopes.move_to_end(staged.scope)
        for address, where in staged.blocks.items():
            if held.setdefault(address, where) is where:
                self._owners.setdefault(where.owner, set()).add(staged.scope)
        while len(self._scopes) > self.max_scopes:
            dropped, blocks_of = self._scopes.popitem(last=False)
            for where in blocks_of.values():
                self._owners.get(where.owner, set()).discard(dropped)

    def forget(self, owner: str) -> None:
        """Drop every block ``owner`` introduced (stored or pending)."""
        for scope in self._owners.pop(owner, set()):
            held = self._scopes.get(scope, {})
            for address in [a for a, w in held.items() if w.owner == owner]:
                del held[address]
        for waiting in self._pending.values():
            for address in [a for a, p in waiting.items() if _owner(p) == owner]:
                del waiting[address]

    def pending(self, scope: Scope) -> Mapping[bytes, PendingPack]:
        """The answer blocks of the scope not stored yet, each with its pack."""
        return self._pending.get(scope, {})

    def add_pending(self, scope: Scope, pack: PendingPack) -> None:
        waiting = self._pending.setdefault(scope, {})
        for address in pack.blocks:
            waiting.setdefault(address, pack)
        while len(self._pending) > self.max_scopes:
            self._pending.pop(next(iter(self._pending)))

    def stored(self, scope: Scope, pack: PendingPack) -> None:
        """A pending pack is stored: its blocks may be referenced."""
        waiting = self._pending.get(scope, {})
        for address in pack.blocks:
            if waiting.get(address) is pack:
                del waiting[address]
        self.add(Staged(scope, pack.blocks))


def _owner(pack: PendingPack) -> str:
    return next(iter(pack.blocks.values())).owner


@dataclass(frozen=True, slots=True)
class _Latest:
    """A request's pieces (when it was laid out) and its blocks with their addresses."""

    pieces: Mapping[str, list[blocks.Piece]]
    addressed: dict[str, list[tuple[bytes, bytes]]]
    size: int


class RecentBlocks:
    """Per lineage (:func:`lineage_of`), its latest request: its pieces and its blocks'
    addresses (this process's memory, at most ``max_bytes`` of them; the least recently
    used lineages dropped).

    An agent resends its context: most of a request is, byte for byte, what the previous
    request had in the same place (field and index). Laid out against the previous
    pieces (:func:`reef.crypto.blocks.laid_out`) such an element is compared instead of
    serialized; a block equal to the one in its place takes its address instead of
    being hashed again. A miss costs the work it would have cost anyway, never a wrong
    block or address.
    """

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._held = 0
        self._latest: OrderedDict[Scope, _Latest] = OrderedDict()

    @property
    def held(self) -> int:
        """The bytes held, pieces and blocks."""
        return self._held

    def earlier(self, lineage: Scope) -> Mapping[str, Sequence[blocks.Piece]]:
        """The pieces of the lineage's latest request (none if it was not laid out)."""
        found = self._latest.get(lineage)
        return {} if found is None else found.pieces

    def addresses(self, lineage: Scope, parts: blocks.Split) -> dict[str, list[bytes]]:
        """Each element's address, by field; the request becomes the lineage's latest."""
        found = self._latest.get(lineage)
        earlier = {} if found is None else found.addressed
        addressed: dict[str, list[tuple[bytes, bytes]]] = {}
        for name, elements in parts.fields.items():
            before = earlier.get(name, [])
            addressed[name] = [
                (e.block, _address(e.block, before[n] if n < len(before) else None))
                for n, e in enumerate(elements)
            ]
        self._remember(lineage, _Latest(parts.pieces, addressed, _size(parts)))
        return {name: [a for _, a in pairs] for name, pairs in addressed.items()}

    def _remember(self, lineage: Scope, latest: _Latest) -> None:
        dropped = self._latest.pop(lineage, None)
        self._held -= 0 if dropped is None else dropped.size
        if latest.size > self.max_bytes:
            return
        self._latest[lineage] = latest
        self._held += latest.size
        while self._held > self.max_bytes:
            _, freed = self._latest.popitem(last=False)
            self._held -= freed.size


def lineage_of(scenario: str, tags: Mapping[str, str], parsed: blocks.Parsed | None) -> Scope:
    """The requests whose latest one the next is laid out against: the session tag, else
    the end-user id the caller's object names (as :func:`scope_of`), else the scenario's
    latest request (a guess: a wrong one costs the work it would have spared)."""
    session = tags.get("session")
    if session:
        return scenario, f"tag:{session}"
    body = parsed.body if parsed is not None else None
    if isinstance(body, dict):
        metadata = body.get("metadata")
        user = metadata.get("user_id") if isinstance(metadata, dict) else None
        user = user or body.get("user")
        if isinstance(user, str) and user:
            return scenario, f"user:{user}"
    return scenario, ""


def _size(parts: blocks.Split) -> int:
    written = sum(len(p.written) for ps in parts.pieces.values() for p in ps)
    stored = sum(
        len(e.block)
        for name, es in parts.fields.items()
        for n, e in enumerate(es)
        if not parts.pieces or e.block is not parts.pieces[name][n].written
    )
    return written + stored


def _address(block: bytes, before: tuple[bytes, bytes] | None) -> bytes:
    if before is not None and before[0] == block:
        return before[1]
    return blocks.digest(block)


class BodyStore:
    """Seals exchanges in ``body_format`` and opens every format for readers.

    Blocks need the artifact store (``claims``): without it a ``blocks`` store seals
    bodies whole (compressed), and reading a body stored as blocks raises LookupError
    (:meth:`EventStore.open <reef.services.eventstore.EventStore.open>` reports the
    record as unreadable): a reader never takes such a body for an absent one.
    ``fetch_claimed`` False leaves claim-checked bodies references while blocks are still
    assembled (a reader passing over a claim-checked object that is gone).
    """

    def __init__(
        self,
        claims: ClaimCheck | None,
        keys: KeyRing,
        *,
        body_format: BodyFormat = "compressed",
        index: BlockIndex | None = None,
        recent: RecentBlocks | None = None,
        cached_packs: int = 512,
        max_prepared: int = 1024,
        fetch_claimed: bool = True,
    ) -> None:
        self.claims = claims
        self.fetch_claimed = fetch_claimed
        self.keys = keys
        self.body_format = body_format
        self.index = index or BlockIndex()
        self.recent = recent or RecentBlocks()
        self._packs: OrderedDict[str, bytes] = OrderedDict()
        self._packs_lock = threading.Lock()
        self._cached_packs = cached_packs
        #: requests being prepared (:meth:`prepare`), by receipt, oldest first
        self._prepared: OrderedDict[str, asyncio.Task[_Planned | None]] = OrderedDict()
        self.max_prepared = max_prepared

    # -- writing --------------------------------------------------------------------------

    def prepare(
        self,
        scenario: str,
        receipt: str,
        tags: Mapping[str, str],
        request: str,
        parsed: blocks.Parsed | None = None,
    ) -> None:
        """Start storing a request's new blocks while the upstream answers (format
        ``blocks``; a no-op otherwise): :meth:`seal` of the record ``receipt`` then finds
        its pack written and its data key chosen. ``parsed``, the request's bytes and
        the object the caller parsed from them, spares parsing it again. Prepared
        requests that are never recorded (an upstream error) are dropped beyond
        ``max_prepared``; their pack stays unreferenced."""
        if self.body_format != "blocks" or self.claims is None:
            return
        draft = _Draft(scenario, receipt, dict(tags), request, parsed)
        self._prepared[receipt] = asyncio.get_running_loop().create_task(
            self._prepare(draft, new_data_key()), name=f"blocks:{receipt}"
        )
        while len(self._prepared) > self.max_prepared:
            self._prepared.popitem(last=False)[1].cancel()

    async def seal(
        self, event: InferenceRecorded
    ) -> tuple[InferenceRecorded, bytes, Staged | None]:
        """(the event sealed, its new data key, the blocks it introduces): its request as
        blocks when it splits, from what :meth:`prepare` stored when it was called."""
        prepared = await self._take(event)
        if prepared is not None:
            return self._sealed(event, prepared, answer_pending=True)
        key = new_data_key()
        compressed = self.body_format != "plain"
        if self.body_format != "blocks" or self.claims is None or event.request_json is None:
            return seal_exchange(event, key, compress=compressed), key, None
        draft = _Draft(event.scenario, event.event_id, event.tags, event.request_json)
        answered = blocks.answer(event.route, event.response_json)
        planned = await self._plan(draft, key, answered)
        if planned is None:
            return seal_exchange(event, key, compress=compressed), key, None
        return self._sealed(event, planned, answer_pending=False)

    async def _take(self, event: InferenceRecorded) -> _Planned | None:
        task = self._prepared.pop(event.event_id, None)
        if task is None:
            return None
        planned = await task  # None when the store was down: sealed again now
        if planned is None or planned.draft.request != event.request_json:
            return None
        return planned

    async def _prepare(self, draft: _Draft, key: bytes) -> _Planned | None:
        try:
            return await self._plan(draft, key, [])
        except ArtifactError:
            return None

    async def _plan(
        self, draft: _Draft, key: bytes, answered: Sequence[blocks.Element]
    ) -> _Planned | None:
        """Split the request; seal and store the pack of the blocks its scope lacks."""
        lineage = lineage_of(draft.scenario, draft.tags, draft.parsed)
        parts = blocks.split(draft.request, draft.parsed, self.recent.earlier(lineage))
        if parts is None:
            return None
        scope = scope_of(draft.scenario, draft.tags, parts)
        addresses = self.recent.addresses(lineage, parts)
        await self._store_pending(scope, addresses)
        every = [
            *(
                (e.block, address)
                for name, es in parts.fields.items()
                for e, address in zip(es, addresses[name], strict=True)
            ),
            *((e.block, blocks.digest(e.block)) for e in answered),
        ]
        found, new, fresh = _looked_up(self.index.get(scope), every)
        ref = ""
        if new:
            aad = body_aad(draft.scenario, draft.receipt, PACK)
            ref = await asyncio.to_thread(
                self._store_pack, seal(key, compress(blocks.pack(new)), aad)
            )
        mine = {a: blocks.Located(draft.receipt, ref, n) for a, n in fresh.items()}
        found.update(mine)
        located = {name: [found[a] for a in each] for name, each in addresses.items()}
        return _Planned(draft, key, scope, parts, located, mine)

    async def _store_pending(self, scope: Scope, addresses: Mapping[str, list[bytes]]) -> None:
        """Store the answer packs of earlier records this request repeats (they become
        referenceable once stored)."""
        pending = self.index.pending(scope)
        wanted = {
            id(p): p
            for found in addresses.values()
            for a in found
            if (p := pending.get(a)) is not None
        }
        for pack in wanted.values():
            await asyncio.to_thread(self._store_pack, pack.sealed)
            self.index.stored(scope, pack)

    def _sealed(
        self, event: InferenceRecorded, planned: _Planned, *, answer_pending: bool
    ) -> tuple[InferenceRecorded, bytes, Staged]:
        manifest = wrap_manifest(blocks.manifest(planned.parts, planned.located))
        sealed = seal_exchange(event, planned.key, request=manifest)
        staged = Staged(planned.scope, planned.mine)
        if answer_pending:
            staged = replace(staged, answer=self._answer_pack(event, planned))
        return sealed, planned.key, staged

    def _answer_pack(self, event: InferenceRecorded, planned: _Planned) -> PendingPack | None:
        """The answer's blocks the scope lacks, sealed under the record's key in memory:
        stored by the next request that repeats them (off this record's path)."""
        known = self.index.get(planned.scope)
        new: dict[bytes, bytes] = {}
        for element in blocks.answer(event.route, event.response_json):
            address = blocks.digest(element.block)
            if address not in known and address not in planned.mine:
                new.setdefault(address, element.block)
        if not new:
            return None
        aad = body_aad(event.scenario, event.event_id, PACK)
        sealed = seal(planned.key, compress(blocks.pack(list(new.values()))), aad)
        ref = ref_for(hashlib.sha256(sealed).hexdigest())
        located = {a: blocks.Located(event.event_id, ref, n) for n, a in enumerate(new)}
        return PendingPack(sealed, located)

    def commit(self, staged: Sequence[Staged | None]) -> None:
        """After the records are durable: their blocks may be referenced by later ones."""
        for one in staged:
            if one is None:
                continue
            if one.blocks:
                self.index.add(one)
            if one.answer is not None:
                self.index.add_pending(one.scope, one.answer)

    def forget(self, owner: str) -> None:
        """An erased record's blocks are introduced again by the next record that has them."""
        self.index.forget(owner)

    def _store_pack(self, sealed_pack: bytes) -> str:
        assert self.claims is not None
        ref = self.claims.store_bytes(sealed_pack)
        self._remember(ref, sealed_pack)
        return ref

    # -- reading --------------------------------------------------------------------------

    async def open_exchange(
        self, event: InferenceRecorded, key: bytes
    ) -> tuple[InferenceRecorded, bool]:
        """(the readable view of a sealed event, complete?): False when a block it
        repeats was erased with the record that introduced it."""
        fetch = self._fetch if self.claims is not None and self.fetch_claimed else None
        if fetch is not None and (event.request_ref or event.response_ref):
            parts = await asyncio.to_thread(open_parts, event, key, fetch)
        else:
            parts = open_parts(event, key)
        texts, complete = await self._texts(event.scenario, list(parts.values()))
        opened = dict(zip(parts, texts, strict=True))
        return with_bodies(event, opened, fetched=fetch is not None), complete

    async def open_trajectory(
        self, trajectory: list[Any], scenario: str, keys: Mapping[str, bytes]
    ) -> tuple[list[Any], bool]:
        """A sample's trajectory opened (see :func:`reef.crypto.bodies.open_trajectory`),
        its manifests assembled; complete False when a turn or a block was erased."""
        fetch = self._fetch if self.claims is not None and self.fetch_claimed else None
        turns, complete = await asyncio.to_thread(
            open_trajectory_contents, trajectory, scenario, keys, fetch
        )
        contents = [
            v.content
            for turn in turns
            if isinstance(turn, dict)
            for v in turn.values()
            if isinstance(v, OpenedBody)
        ]
        texts, assembled = await self._texts(scenario, contents)
        by_id = {id(c): t for c, t in zip(contents, texts, strict=True)}

        def text(content: Content) -> str:
            found = by_id[id(content)]
            return "null" if found is None else found

        return loaded_trajectory(turns, text), complete and assembled

    async def _texts(
        self, scenario: str, contents: Sequence[Content | None]
    ) -> tuple[list[str | None], bool]:
        """Each content's text (manifests assembled: one key look-up for all owners)."""
        plans = {
            n: blocks.read_manifest(c.data)
            for n, c in enumerate(contents)
            if isinstance(c, Manifest)
        }
        if not plans:
            return [c if isinstance(c, str) else None for c in contents], True
        if self.claims is None:
            raise LookupError("a body stored as blocks and no artifact store to assemble it")
        owners = {owner for plan in plans.values() for owner in plan.owners}
        keys = await self.keys.get_many(owners)
        built = await asyncio.to_thread(self._assemble_all, scenario, plans, keys)
        out: list[str | None] = []
        complete = True
        for n, content in enumerate(contents):
            if n in built:
                text, whole = built[n]
                out.append(text)
                complete = complete and whole
            else:
                out.append(content if isinstance(content, str) else None)
        return out, complete

    def _assemble_all(
        self, scenario: str, plans: Mapping[int, blocks.Plan], keys: Mapping[str, bytes]
    ) -> dict[int, tuple[str, bool]]:
        opened: dict[tuple[str, str], list[bytes] | None] = {}
        out = {}
        for n, plan in plans.items():
            packs = []
            for owner, ref in plan.packs:
                if (owner, ref) not in opened:
                    opened[owner, ref] = self._open_pack(scenario, owner, ref, keys.get(owner))
                packs.append(opened[owner, ref])
            out[n] = blocks.assemble(plan, packs)
        return out

    def _open_pack(
        self, scenario: str, owner: str, ref: str, key: bytes | None
    ) -> list[bytes] | None:
        """A pack's blocks; None when its owner has no key (erased) or its object is gone."""
        if key is None:
            return None
        try:
            blob = self._pack_bytes(ref)
        except ArtifactError:
            return None
        aad = body_aad(scenario, owner, PACK)
        return blocks.unpack(decompress(open_sealed(key, blob, aad)))

    def _fetch(self, ref: str) -> bytes:
        if self.claims is None:
            raise LookupError(f"claim-checked body {ref} and no artifact store")
        return self.claims.fetch_bytes(ref)

    def _pack_bytes(self, ref: str) -> bytes:
        """A pack's sealed bytes, kept in memory (a key is still needed to open them)."""
        with self._packs_lock:
            found = self._packs.get(ref)
            if found is not None:
                self._packs.move_to_end(ref)
                return found
        data = self._fetch(ref)
        self._remember(ref, data)
        return data

    def _remember(self, ref: str, data: bytes) -> None:
        with self._packs_lock:
            self._packs[ref] = data
            while len(self._packs) > self._cached_packs:
                self._packs.popitem(last=False)
