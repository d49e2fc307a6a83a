"""Images and documents: recognised in each dialect and moved between them by reference.

A reference is a URL, a provider file id or an inline ``data:`` source; nothing is
fetched. A form a target dialect cannot express is written as a text part naming the
reference, so the model still sees that something was attached.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from reef.core.dialogue.model import JSON, Media

_IMAGE = frozenset({"image_url", "image", "input_image"})
_DOCUMENT = frozenset({"file", "document", "input_file"})


def kind_of(block: dict[str, Any]) -> Literal["image", "document"] | None:
    kind = block.get("type")
    if kind in _IMAGE:
        return "image"
    if kind in _DOCUMENT:
        return "document"
    return None


def reference(part: Media) -> dict[str, str]:
    """``{"url": ...}``, ``{"file_id": ...}`` or ``{"data": ..., "media_type": ...}``."""
    block = part.block
    kind = block.get("type")
    if kind == "image_url":
        inner = block.get("image_url")
        url = inner.get("url") if isinstance(inner, dict) else inner
        return _from_url(str(url))
    if kind in ("image", "document"):  # Anthropic
        source = block.get("source")
        if isinstance(source, dict):
            if source.get("type") == "url":
                return {"url": str(source.get("url"))}
            if source.get("type") == "base64":
                return {
                    "data": str(source.get("data")),
                    "media_type": str(source.get("media_type")),
                }
            if source.get("type") == "file":
                return {"file_id": str(source.get("file_id"))}
    if kind == "input_image":
        if block.get("file_id"):
            return {"file_id": str(block["file_id"])}
        return _from_url(str(block.get("image_url")))
    if kind in ("file", "input_file"):
        inner = block.get("file") if kind == "file" else block
        if isinstance(inner, dict):
            if inner.get("file_id"):
                return {"file_id": str(inner["file_id"])}
            if inner.get("file_url"):
                return {"url": str(inner["file_url"])}
            if inner.get("file_data"):
                return _from_url(str(inner["file_data"]))
    return {"text": json.dumps(block, ensure_ascii=False)}


def _from_url(url: str) -> dict[str, str]:
    if url.startswith("data:") and ";base64," in url:
        head, _, data = url.partition(";base64,")
        return {"data": data, "media_type": head.removeprefix("data:")}
    return {"url": url}


def _data_url(ref: dict[str, str]) -> str:
    return f"data:{ref['media_type']};base64,{ref['data']}"


def _unexpressed(ref: dict[str, str], part: Media) -> JSON:
    return {"type": "text", "text": f"[{part.kind}: {ref.get('file_id') or ref.get('text', '')}]"}


def to_chat(part: Media) -> JSON:
    if part.dialect in ("chat", "anthropic") and part.block.get("type") in ("image_url", "file"):
        return part.block
    ref = reference(part)
    if part.kind == "image" and ("url" in ref or "data" in ref):
        url = ref["url"] if "url" in ref else _data_url(ref)
        return {"type": "image_url", "image_url": {"url": url}}
    if part.kind == "document" and "file_id" in ref:
        return {"type": "file", "file": {"file_id": ref["file_id"]}}
    if part.kind == "document" and "data" in ref:
        return {"type": "file", "file": {"file_data": _data_url(ref)}}
    return _unexpressed(ref, part)


def to_anthropic(part: Media) -> JSON:
    if part.block.get("type") in ("image", "document"):
        return part.block
    ref = reference(part)
    kind = "image" if part.kind == "image" else "document"
    if "url" in ref:
        return {"type": kind, "source": {"type": "url", "url": ref["url"]}}
    if "data" in ref:
        source = {"type": "base64", "media_type": ref["media_type"], "data": ref["data"]}
        return {"type": kind, "source": source}
    if "file_id" in ref:
        return {"type": kind, "source": {"type": "file", "file_id": ref["file_id"]}}
    return _unexpressed(ref, part)


def to_responses(part: Media) -> JSON:
    if part.block.get("type") in ("input_image", "input_file"):
        return part.block
    ref = reference(part)
    if part.kind == "image":
        if "file_id" in ref:
            return {"type": "input_image", "file_id": ref["file_id"], "detail": "auto"}
        url = ref["url"] if "url" in ref else _data_url(ref) if "data" in ref else None
        if url is not None:
            return {"type": "input_image", "image_url": url, "detail": "auto"}
    if "file_id" in ref:
        return {"type": "input_file", "file_id": ref["file_id"]}
    if "url" in ref:
        return {"type": "input_file", "file_url": ref["url"]}
    if "data" in ref:
        return {"type": "input_file", "file_data": _data_url(ref)}
    return {"type": "input_text", "text": _unexpressed(ref, part)["text"]}
