"""Reading a request by what is new in it.

An agent resends its whole context every turn, so a request is, byte for byte, the
previous request of its session with the end of one list changed: Claude Code writes
``messages`` before a ``system`` prompt and ``tools`` that stay the same all session,
Codex writes ``input`` between its ``instructions`` and ``tools``. :class:`RecentRequests`
keeps each session's latest request as a :class:`Layout`: its bytes up to that list
(``head``), each element's bytes and value, and its bytes from the end of the list
(``tail``). The session's next request is read as

    head (compared) + the first elements (compared, in order) + the rest of the
    list (parsed) + tail (compared)

so parsing it, checking its nesting and decoding its text cost what changed in it,
plus comparisons of bytes, not its size.

**Why the result is the full parse's.** A layout is made only from a request whose
bytes are exactly what orjson writes for the object parsed from them (so it has no
duplicate member and no whitespace; other requests are always parsed whole). When the
next request starts with ``head`` and ends with ``tail``, every byte outside the rest
of the list stands where it stood in that request, in the same context: the members
before the list, the list's opening, and after its end the same members. Each element
compared equal is a complete JSON value, so its bytes are that value wherever they
stand. What is left between them must parse, wrapped in brackets, as one JSON array:
only then is it a sequence of whole values (a bracket closed early, or a string left
open, makes the wrapped bytes invalid). The request is then exactly the old one with
that list's elements, and it holds the JSON the full parse accepts; anything else
(bytes that differ, a region that does not parse, nesting too deep) gives no result,
and the request is parsed whole, which also words any error.

The layouts live in this process's memory only, at most :data:`MAX_HELD` bytes of
requests, least recently used sessions dropped first.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from itertools import takewhile
from typing import Any, Final

import orjson

from reef.api.inputs import MAX_DEPTH, decoded_object, deeper_than

#: the members whose elements an agent appends to, one of them per request
LISTS: Final = ("messages", "input")
#: request bytes held, over every session's layout
MAX_HELD: Final = 16 << 20


@dataclass(frozen=True, slots=True)
class Layout:
    """A request as the next one of its session is compared with it."""

    #: the member holding the list (``messages`` or ``input``)
    name: str
    #: the bytes up to and including the list's ``[``, and their text
    head: bytes
    head_text: str
    #: each element's bytes (after the first, with the comma before it), text and value
    pieces: tuple[bytes, ...]
    texts: tuple[str, ...]
    values: tuple[Any, ...]
    #: the bytes from the list's ``]`` to the end, and their text
    tail: bytes
    tail_text: str
    #: the request's members (the list's value is ``values``); never handed out
    members: dict[str, Any]

    @property
    def size(self) -> int:
        return len(self.head) + sum(len(p) for p in self.pieces) + len(self.tail)


def lay_out(raw: bytes, body: dict[str, Any]) -> Layout | None:
    """The layout of a request (``body``: the object parsed from ``raw``);
    None unless ``raw`` is ``body`` exactly as orjson writes it, with a list to read."""
    name = next((n for n in LISTS if type(body.get(n)) is list), None)
    if name is None:
        return None
    try:
        if orjson.dumps(body) != raw:
            return None
    except TypeError:  # not what orjson parsed (an integer beyond 64 bits)
        return None
    before = dict(takewhile(lambda member: member[0] != name, body.items()))
    head_end = len(orjson.dumps({**before, name: []})) - 2  # up to `[`: `[]}` minus `]}`
    values = tuple(body[name])
    pieces = tuple((b"," if n else b"") + orjson.dumps(v) for n, v in enumerate(values))
    tail_start = head_end + sum(len(p) for p in pieces)
    head, tail = raw[:head_end], raw[tail_start:]
    texts = tuple(p.decode() for p in pieces)
    return Layout(
        name,
        head,
        head.decode(),
        pieces,
        texts,
        values,
        tail,
        tail.decode(),
        {**body, name: values},
    )


def reread(raw: bytes, layout: Layout) -> tuple[str, dict[str, Any], Layout] | None:
    """``raw``'s text and object read by what is new in it against ``layout``, with its
    own layout (``layout`` again when the new elements are not as orjson writes them);
    None when it cannot be read so (then it is parsed whole)."""
    head, tail = layout.head, layout.tail
    end = len(raw) - len(tail)
    if end < len(head) or not raw.startswith(head) or not raw.endswith(tail):
        return None
    at, kept = len(head), 0
    for piece in layout.pieces:
        if at + len(piece) > end or not raw.startswith(piece, at):
            break
        at += len(piece)
        kept += 1
    region = raw[at:end]
    inner = region
    if kept and region:
        if not region.startswith(b","):
            return None
        inner = region[1:]
    try:
        added = orjson.loads(b"[" + inner + b"]")
    except orjson.JSONDecodeError:
        return None
    if deeper_than(added, MAX_DEPTH - 1):  # the list stands at level 2
        return None
    try:
        region_text = region.decode()
    except UnicodeDecodeError:
        return None
    text = "".join((layout.head_text, *layout.texts[:kept], region_text, layout.tail_text))
    values = layout.values[:kept] + tuple(added)
    members = {**layout.members, layout.name: values}
    pieces, texts = list(layout.pieces[:kept]), list(layout.texts[:kept])
    for n, value in enumerate(added, start=kept):
        written = (b"," if n else b"") + orjson.dumps(value)
        if not raw.startswith(written, at):
            return text, _handed_out(members, layout.name), layout
        pieces.append(written)
        texts.append(written.decode())
        at += len(written)
    if at != end:  # whitespace between the new elements: compared by the old layout
        return text, _handed_out(members, layout.name), layout
    latest = Layout(
        layout.name,
        head,
        layout.head_text,
        tuple(pieces),
        tuple(texts),
        values,
        tail,
        layout.tail_text,
        members,
    )
    return text, _handed_out(members, layout.name), latest


def _handed_out(members: dict[str, Any], name: str) -> dict[str, Any]:
    """The caller's own object: a new dict and list (their elements are shared, and no
    part of Reef changes a request's elements in place)."""
    return {**members, name: list(members[name])}


class RecentRequests:
    """Per session, the latest request's :class:`Layout`; reads the next one by it."""

    def __init__(self, max_bytes: int = MAX_HELD) -> None:
        self.max_bytes = max_bytes
        self._held = 0
        self._layouts: OrderedDict[Hashable, Layout] = OrderedDict()
        #: requests read by what was new in them, and read whole
        self.reread = 0
        self.parsed = 0

    @property
    def held(self) -> int:
        """The request bytes held."""
        return self._held

    def read(self, session: Hashable, raw: bytes) -> tuple[str, dict[str, Any]]:
        """The request's text and object, as :func:`reef.api.inputs.decoded_object` gives
        them (and raises its errors), read by what is new since the session's latest."""
        layout = self._layouts.get(session)
        if layout is not None:
            found = reread(raw, layout)
            if found is not None:
                text, body, latest = found
                self._remember(session, latest)
                self.reread += 1
                return text, body
        text, body = decoded_object(raw)
        self.parsed += 1
        members = dict(body)  # before the caller sets a member of its own
        try:
            asyncio.get_running_loop().call_soon(self._lay_out, session, raw, members)
        except RuntimeError:  # no event loop: laid out now
            self._lay_out(session, raw, members)
        return text, body

    def _lay_out(self, session: Hashable, raw: bytes, body: dict[str, Any]) -> None:
        """Lay a request read whole out for the next one (at the event loop's next turn:
        while the request waits for its upstream, not before it is sent)."""
        if len(raw) <= self.max_bytes and (layout := lay_out(raw, body)) is not None:
            self._remember(session, layout)

    def _remember(self, session: Hashable, layout: Layout) -> None:
        dropped = self._layouts.pop(session, None)
        self._held -= 0 if dropped is None else dropped.size
        self._layouts[session] = layout
        self._held += layout.size
        while self._held > self.max_bytes:
            _, freed = self._layouts.popitem(last=False)
            self._held -= freed.size
