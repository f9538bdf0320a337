"""How the console shows values: pretty JSON and chunks. Pure Python.

A chunk is shown from its API/WebSocket shape (``ChunkOut``), so the server-rendered list and the
live chunks the browser appends (``static/console/live.js``) show the same things.
"""

from __future__ import annotations

import json
from typing import Any

#: Longest JSON shown in full on a page; beyond it the text is cut (the API has the rest).
MAX_PRETTY_CHARS = 100_000

#: Hex digits of a shortened id the console shows.
SHORT_ID_DIGITS = 8


def short_id(value: Any) -> str:
    """``"…9f3c2a7b"``: the last hex digits of an id (its random part; uuid7 ids made in the same
    minutes share their first, time-ordered digits), or ``""`` for no id. The full id goes in a
    ``title`` next to it (the ``short_id`` filter of ``console_ids``); the live pages'
    ``live.js`` shortens the same way."""
    if value is None or value == "":
        return ""
    digits = str(value).replace("-", "")
    if len(digits) <= SHORT_ID_DIGITS:
        return digits
    return "…" + digits[-SHORT_ID_DIGITS:]


def pretty(value: Any, *, limit: int = MAX_PRETTY_CHARS) -> str:
    """Indented JSON (keys in stored order), cut at ``limit`` characters."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) > limit:
        return text[:limit] + f"\n… cut: {len(text) - limit} more characters"
    return text


def compact(value: Any, *, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def usage_text(usage: Any) -> str:
    """``"120 in · 45 out · $0.0012"`` for a chunk's usage (empty when there is none)."""
    if not isinstance(usage, dict):
        return ""
    parts = []
    if usage.get("prompt_tokens") is not None:
        parts.append(f"{usage['prompt_tokens']} in")
    if usage.get("completion_tokens") is not None:
        parts.append(f"{usage['completion_tokens']} out")
    if not parts and usage.get("total_tokens") is not None:
        parts.append(f"{usage['total_tokens']} tokens")
    cost = usage.get("cost_usd")
    if isinstance(cost, int | float) and cost:
        parts.append(f"${cost:.4f}")
    return " · ".join(parts)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else pretty(value)


def artifact_view(ref: Any, session_id: Any) -> dict[str, Any] | None:
    """An artifact reference (``{"digest", "media_type", "size", "name"}``) with the address
    that downloads it through the session that refers to it (``None``: not a reference)."""
    if not isinstance(ref, dict) or not isinstance(ref.get("digest"), str) or not session_id:
        return None
    size = ref.get("size")
    return {
        "digest": ref["digest"],
        "name": str(ref.get("name") or ref.get("filename") or ""),
        "media_type": str(ref.get("media_type") or ""),
        "size": f"{size:,} bytes" if isinstance(size, int) else "",
        "url": f"/api/v1/sessions/{session_id}/artifacts/{ref['digest']}/",
    }


def chunk_view(chunk: dict[str, Any], *, session_id: Any = None) -> dict[str, Any]:
    """Display fields of a chunk in its ``ChunkOut`` shape; ``session_id``: the session the
    page shows (an artifact is downloaded through it; default: where the chunk is stored)."""
    content = chunk.get("content")
    viewer = session_id or chunk.get("session")
    body: dict[str, Any] = {"kind": "json", "json": pretty(content)}
    if isinstance(content, dict):
        kind = chunk.get("kind")
        if kind in ("message", "summary") and isinstance(content.get("text"), str):
            body = {"kind": "text", "text": content["text"]}
        elif kind == "artifact":
            body = {"kind": "artifact", "artifact": artifact_view(content, viewer)}
        elif kind == "tool_call":
            body = {
                "kind": "tool_call",
                "name": str(content.get("name", "")),
                "call_id": str(content.get("id", "")),
                "arguments": pretty(content.get("arguments")),
            }
        elif kind == "tool_result":
            body = {
                "kind": "tool_result",
                "name": str(content.get("name", "")),
                "call_id": str(content.get("tool_call_id", chunk.get("tool_call_id", ""))),
                "output": _text(content.get("output")),
                "error": _text(content["error"]) if content.get("error") is not None else "",
                "artifact": artifact_view(content.get("artifact"), viewer),
            }
    return {
        **chunk,
        "body": body,
        "usage_text": usage_text(chunk.get("usage")),
        "kind_label": KIND_LABELS.get(str(chunk.get("kind")), str(chunk.get("kind"))),
        "created_text": str(chunk.get("created_at") or "")[:19].replace("T", " "),
    }


#: How each chunk kind is named on the page (a word next to its colour and border).
KIND_LABELS = {
    "message": "message",
    "tool_call": "tool call",
    "tool_result": "tool result",
    "summary": "summary",
    "event": "event",
    "artifact": "artifact",
}


#: How each change of a ``json_diff`` is named on the page.
CHANGE_LABELS = {"add": "added", "remove": "removed", "replace": "changed"}


def diff_rows(changes: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The rows of a difference table: each ``json_diff`` change as its path (``/`` for the
    whole value), what it was and what it is now (pretty JSON, ``""`` for the side it is
    absent on)."""
    rows = []
    for change in changes or []:
        op = str(change.get("op", ""))
        rows.append(
            {
                "op": op,
                "label": CHANGE_LABELS.get(op, op),
                "path": change.get("path") or "/",
                "old": pretty(change["old"], limit=4000) if "old" in change else "",
                "new": pretty(change["new"], limit=4000) if "new" in change else "",
            }
        )
    return rows
