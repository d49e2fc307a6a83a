"""A request body as content-addressed blocks, and back (pure: no key, no I/O).

An agent resends its whole context every turn, so a request is mostly what earlier
requests of its session already held. :func:`split` cuts a request into **blocks**: the
``system`` prompt, the ``instructions``, the ``tools`` array (one block each), and each
element of ``messages`` or ``input``; a block is the compact JSON of that element
(``canonical``). Cache breakpoints (``cache_control`` on a content part: an agent moves
them to the newest message every turn) are lifted out of a block into the manifest, so a
message is the same block whether or not it carried the breakpoint.

A **manifest** (what the record seals instead of its request) holds the rest of the body
(``template``), the packs the blocks come from (``[owner receipt, sha256:<oid>]``: each
record seals the blocks it introduced as one pack under its own data key) and, per field,
runs ``[pack, first index, count]``. :func:`assemble` rebuilds the body byte-exactly by
construction: :func:`split` keeps a body only when serializing the object it parsed in
one of :data:`STYLES` gives back the request's bytes (otherwise the record stores its
body whole); every value reaches a block as orjson writes it and is read back equal (the
body was parsed by orjson, or an object that orjson serializes to those very bytes);
the template keeps each member's place; and a breakpoint is lifted only where it is its
content part's last key, so putting it back last restores the part. A block whose pack
cannot be opened (its owner was erased) becomes :data:`ERASED` in place of the element
(the whole field for a single-block field).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson

from reef.crypto.seal import SealError

#: fields stored as one block each
SINGLE: Final = ("system", "instructions", "tools")
#: fields whose elements are one block each (when they are lists)
LISTS: Final = ("messages", "input")
#: the serializations a body may use to be stored as blocks (byte-exact assembly):
#: orjson's (compact, UTF-8: what JavaScript's JSON.stringify writes, and the fastest),
#: the json module's compact one, and its default (Python clients, Reef's own rewrites)
STYLES: Final[dict[str, dict[str, Any] | None]] = {
    "orjson": None,
    "compact": {"separators": (",", ":"), "ensure_ascii": False},
    "python": {},
}
#: what stands in for an element whose block was erased
ERASED: Final = {"erased": True}
MARK: Final = "cache_control"


def canonical(value: Any) -> bytes:
    """A block's bytes: compact JSON, keys in their given order, UTF-8."""
    return orjson.dumps(value)


def dumps(value: Any, style: str) -> str:
    """``value`` serialized in ``style`` (one of :data:`STYLES`)."""
    options = STYLES[style]
    if options is None:
        return orjson.dumps(value).decode("utf-8")
    return json.dumps(value, **options)


def digest(block: bytes) -> bytes:
    """A block's address among the blocks of its scope (held in memory only)."""
    return hashlib.sha256(block).digest()


@dataclass(frozen=True, slots=True)
class Element:
    """One block of a request and the cache breakpoints lifted out of it."""

    block: bytes
    #: ``[part index, cache_control value]`` pairs, re-added last in those parts
    marks: list[list[Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Piece:
    """An element as the request wrote it (``written``: orjson's bytes of it, a complete
    JSON value) and as it is stored."""

    written: bytes
    element: Element


@dataclass(frozen=True, slots=True)
class Split:
    """A request cut into blocks: the rest of the body, and each field's elements."""

    style: str
    template: dict[str, Any]
    fields: dict[str, list[Element]]
    lists: list[str]
    #: each element as written, when the request was laid out from a caller's object
    pieces: dict[str, list[Piece]] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class Parsed:
    """A request as its caller holds it: ``raw``, the UTF-8 bytes the request's text
    was decoded from, and ``body``, the object parsed from them. A hint that spares
    :func:`split` a second parse when ``raw`` is ``body`` as orjson writes it; an object
    changed since, or a body in another style, only costs that parse."""

    raw: bytes
    body: object


def split(
    text: str, parsed: Parsed | None = None, earlier: Mapping[str, Sequence[Piece]] | None = None
) -> Split | None:
    """The request as blocks; None when it has none or is not in a known style.

    With ``parsed``, the request's bytes are laid out piece by piece (:func:`laid_out`),
    an element of ``earlier`` (another request's pieces, by field) compared in place
    rather than serialized again; a request that does not lay out is parsed from
    ``text``.
    """
    if parsed is not None:
        found = laid_out(parsed, earlier or {})
        if found is not None:
            return found or None
    styled = _styled(text)
    if styled is None:
        return None
    body, style = styled
    fields: dict[str, list[Element]] = {}
    lists: list[str] = []
    for name in (*SINGLE, *LISTS):
        if name not in body:
            continue
        value = body[name]
        if name in LISTS and isinstance(value, list):
            fields[name] = [_element(v) for v in value]
            lists.append(name)
        else:
            fields[name] = [_element(value)]
    if not fields:
        return None
    template = {k: (None if k in fields else v) for k, v in body.items()}
    return Split(style, template, fields, lists)


def answer(route: str, response: str | None) -> list[Element]:
    """The blocks an agent resends of this exchange's answer in its next request: the
    assistant message of an Anthropic message or of a chat completion's first choice,
    each output item of a Responses answer (none when the response has no such shape).
    A record introduces them with its request's blocks, so erasing it erases its answer
    wherever the agent repeats it unchanged."""
    try:
        body = orjson.loads(response) if response else None
    except orjson.JSONDecodeError:
        return []
    if not isinstance(body, dict):
        return []
    found: list[Any] = []
    if route == "/v1/messages" and isinstance(body.get("content"), list):
        found = [{"role": "assistant", "content": body["content"]}]
    elif route == "/v1/chat/completions" and isinstance(body.get("choices"), list):
        first = body["choices"][0] if body["choices"] else None
        if isinstance(first, dict) and isinstance(first.get("message"), dict):
            found = [first["message"]]
    elif route == "/v1/responses" and isinstance(body.get("output"), list):
        found = list(body["output"])
    return [_element(value) for value in found]


def _styled(text: str) -> tuple[dict[str, Any], str] | None:
    """The body ``text`` holds and the style it is written in (None: not an object, or
    in no known style)."""
    try:
        body = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    style = next((s for s in STYLES if _same(body, s, text)), None)
    return None if style is None else (body, style)


def _same(body: dict[str, Any], style: str, text: str) -> bool:
    try:
        if STYLES[style] is None:
            # compared as UTF-8: ``text`` holds its UTF-8 since orjson parsed it, while
            # decoding the serialized bytes would build a second string of the body
            return orjson.dumps(body) == text.encode("utf-8")
        return dumps(body, style) == text
    except (TypeError, ValueError):  # orjson.JSONEncodeError: an int beyond 64 bits
        return False


def _parts(value: Any) -> list[Any] | None:
    """The content parts that may carry a cache breakpoint: a message's content list,
    or a list of system parts."""
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        return list(value["content"])
    if isinstance(value, list):
        return value
    return None


def _element(value: Any, written: bytes | None = None) -> Element:
    """``value``'s block (``written``: its canonical bytes, when known) and marks."""
    parts = _parts(value)
    if parts is None or not any(isinstance(p, dict) and MARK in p for p in parts):
        return Element(canonical(value) if written is None else written)
    if any(isinstance(p, dict) and MARK in p and next(reversed(p)) != MARK for p in parts):
        # a breakpoint put back last would move: it stays in the block
        return Element(canonical(value) if written is None else written)
    marks: list[list[Any]] = []
    bare = []
    for n, part in enumerate(parts):
        if isinstance(part, dict) and MARK in part:
            marks.append([n, part[MARK]])
            part = {k: v for k, v in part.items() if k != MARK}
        bare.append(part)
    stripped = {**value, "content": bare} if isinstance(value, dict) else bare
    return Element(canonical(stripped), marks)


def _marked(value: Any, marks: Sequence[Sequence[Any]]) -> Any:
    if not marks:
        return value
    parts = _parts(value)
    if parts is None:
        raise SealError("a block's cache breakpoints name no content parts")
    for n, mark in marks:
        parts[n] = {**parts[n], MARK: mark}
    return {**value, "content": parts} if isinstance(value, dict) else parts


# -- laying a request out -----------------------------------------------------------------


def laid_out(
    parsed: Parsed, earlier: Mapping[str, Sequence[Piece]]
) -> Split | Literal[False] | None:
    """``parsed.raw`` read piece by piece along ``parsed.body`` (None: it is not that
    body as orjson writes it; False: it is, with no field stored as blocks).

    Every member name, template value and element is checked in place, in order, as
    orjson writes it: the bytes are then exactly that object, each piece a complete
    JSON value standing where the object has it, whatever became of ``parsed.body``
    since it was parsed (a member is read back from its own bytes). An element whose
    bytes are those of the piece at its place in ``earlier`` is that piece: compared,
    neither serialized nor stripped of its breakpoints again. So a request costs what
    it has that ``earlier`` had not, plus one comparison of its bytes.
    """
    body, cursor = parsed.body, _Cursor(parsed.raw)
    if not isinstance(body, dict):
        return None
    template: dict[str, Any] = {}
    pieces: dict[str, list[Piece]] = {}
    try:
        cursor.take(b"{")
        for n, (name, value) in enumerate(body.items()):
            cursor.take((b"," if n else b"") + orjson.dumps(name) + b":")
            found = _laid_field(cursor, name, value, earlier.get(name, ()))
            if found is not None:
                template[name] = None
                pieces[name] = found
                continue
            written = orjson.dumps(value)
            cursor.take(written)
            template[name] = orjson.loads(written)  # the bytes' value, not the object's
        cursor.take(b"}")
    except (TypeError, ValueError):  # the bytes differ, or an int beyond 64 bits (orjson)
        return None
    if cursor.at != len(parsed.raw):
        return None
    order: list[str] = [n for n in (*SINGLE, *LISTS) if n in pieces]
    if not order:
        return False
    lists = [n for n in order if n in LISTS and isinstance(body[n], list)]
    fields = {n: [p.element for p in pieces[n]] for n in order}
    return Split("orjson", template, fields, lists, {n: pieces[n] for n in order})


class _Cursor:
    """A position in a request's bytes that moves past what it expects there."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.at = 0

    def take(self, expected: bytes) -> None:
        """Move past ``expected``; ValueError when the bytes here differ."""
        if not self.raw.startswith(expected, self.at):
            raise ValueError("the request's bytes differ from the object as orjson writes it")
        self.at += len(expected)

    def took(self, expected: bytes) -> bool:
        """Whether ``expected`` stands here as a whole value (then moved past it): a
        number may go on past what matched (``1`` of ``12``)."""
        end = self.at + len(expected)
        if not self.raw.startswith(expected, self.at) or self.raw[end : end + 1] not in _ENDS:
            return False
        self.at = end
        return True


_ENDS: Final = (b",", b"]", b"}")


def _laid_field(
    cursor: _Cursor, name: str, value: Any, earlier: Sequence[Piece]
) -> list[Piece] | None:
    """The pieces of a field stored as blocks; None when ``name`` is no such field."""
    if name not in SINGLE and name not in LISTS:
        return None
    if name not in LISTS or not isinstance(value, list):
        return [_laid_piece(cursor, value, earlier[0] if earlier else None)]
    cursor.take(b"[")
    pieces: list[Piece] = []
    for n, item in enumerate(value):
        if n:
            cursor.take(b",")
        pieces.append(_laid_piece(cursor, item, earlier[n] if n < len(earlier) else None))
    cursor.take(b"]")
    return pieces


def _laid_piece(cursor: _Cursor, value: Any, before: Piece | None) -> Piece:
    if before is not None and cursor.took(before.written):
        return before
    written = orjson.dumps(value)
    cursor.take(written)
    return Piece(written, _element(value, written))


# -- the manifest --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Located:
    """Where a block lives: the pack of the record that introduced it, and its index."""

    owner: str
    ref: str
    index: int


def manifest(split_body: Split, located: Mapping[str, list[Located]]) -> bytes:
    """The manifest of ``split_body`` whose elements live where ``located`` says."""
    packs: dict[tuple[str, str], int] = {}
    fields: dict[str, list[list[int]]] = {}
    marks: dict[str, list[list[Any]]] = {}
    for name, elements in split_body.fields.items():
        runs: list[list[int]] = []
        for n, (element, where) in enumerate(zip(elements, located[name], strict=True)):
            pack = packs.setdefault((where.owner, where.ref), len(packs))
            last = runs[-1] if runs else None
            if last is not None and last[0] == pack and last[1] + last[2] == where.index:
                last[2] += 1
            else:
                runs.append([pack, where.index, 1])
            if element.marks:
                marks.setdefault(name, []).append([n, element.marks])
        fields[name] = runs
    out = {
        "style": split_body.style,
        "template": split_body.template,
        "packs": [list(k) for k in packs],
        "fields": fields,
        "lists": split_body.lists,
        "marks": marks,
    }
    return canonical(out)


@dataclass(frozen=True, slots=True)
class Plan:
    """A manifest read back: what it needs (packs) before it can be assembled."""

    style: str
    template: dict[str, Any]
    packs: list[tuple[str, str]]
    fields: dict[str, list[list[int]]]
    lists: list[str]
    marks: dict[str, list[list[Any]]]

    @property
    def owners(self) -> list[str]:
        """The records whose keys open this manifest's packs."""
        return sorted({owner for owner, _ in self.packs})


def read_manifest(data: bytes) -> Plan:
    try:
        raw = orjson.loads(data)
        return Plan(
            style=raw["style"],
            template=raw["template"],
            packs=[(str(o), str(r)) for o, r in raw["packs"]],
            fields=raw["fields"],
            lists=list(raw["lists"]),
            marks=raw.get("marks", {}),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise SealError(f"not a block manifest: {exc}") from None


def assemble(plan: Plan, packs: Sequence[Sequence[bytes] | None]) -> tuple[str, bool]:
    """(the body, complete?): ``packs[n]`` holds pack ``n``'s blocks, None when erased."""
    if plan.style not in STYLES or len(packs) != len(plan.packs):
        raise SealError("a block manifest names an unknown style or other packs")
    body = dict(plan.template)
    complete = True
    for name, runs in plan.fields.items():
        elements: list[Any] = []
        for pack, first, count in runs:
            blocks = packs[pack]
            if blocks is None:
                elements.extend(dict(ERASED) for _ in range(count))
                complete = False
                continue
            if first + count > len(blocks):
                raise SealError("a block manifest points past the end of a pack")
            elements.extend(orjson.loads(b) for b in blocks[first : first + count])
        for n, marks in plan.marks.get(name, []):
            if elements[n] != ERASED:
                elements[n] = _marked(elements[n], marks)
        body[name] = elements if name in plan.lists else elements[0]
    return dumps(body, plan.style), complete


# -- packs ---------------------------------------------------------------------------------


def pack(blocks: Sequence[bytes]) -> bytes:
    """The blocks a record introduces, one per line (compact JSON has no raw newline)."""
    return b"\n".join(blocks)


def unpack(data: bytes) -> list[bytes]:
    return data.split(b"\n")
