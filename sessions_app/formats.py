"""File formats a session graph can be read from or written to. Pure Python.

* Ours (``openrath-django/sessions`` version 1): a header, then ``session``, ``edge`` and
  ``chunk`` records, then a trailer with counts, one JSON object per line.
* OpenRath v1 persisted session logs: one ``<id>.jsonl`` per session with ``header``, ``chunk``
  and ``trailer`` records (``<id>.jsonl.__partial__`` when the writer crashed: no trailer).
* OpenRath v1 lineage exports: one row per session (``id``, ``parent_session_ids``,
  ``lineage_operator``, ``lineage_kind``, ``lineage_extras``, ``chunk_count``,
  ``cumulative_usage``), no chunk content.

The field mapping is documented in ``docs/sessions.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

EXPORT_FORMAT = "openrath-django/sessions"
EXPORT_VERSION = 1
V1_SCHEMA_VERSION = 1
V1_CHUNK_KINDS = ("system", "user", "assistant", "tool_result")

#: v1 ``lineage_kind`` -> (our session op, our op for the edge from the first parent).
V1_KIND_OPS: dict[str, tuple[str, str]] = {
    "op_fork": ("fork", "fork"),
    "op_merge": ("merge", "merge"),
    "op_session_compress": ("compress", "compress"),
    "op_session_loop": ("fork", "fork"),
}


class FormatError(ValueError):
    """A file that cannot be read; the message names the file and line."""


def detect_format(name: str, text: str) -> str:
    """``"export"``, ``"v1-session"`` or ``"v1-lineage"``."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            first = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{name}:{lineno}: invalid JSON: {exc.msg}") from exc
        if not isinstance(first, dict):
            raise FormatError(f"{name}:{lineno}: a record must be a JSON object")
        if first.get("type") == "header" and first.get("format") == EXPORT_FORMAT:
            return "export"
        if "record_type" in first:
            return "v1-session"
        if "lineage_operator" in first and "id" in first:
            return "v1-lineage"
        raise FormatError(
            f"{name}:{lineno}: not a session export, OpenRath v1 session log or v1 lineage export"
        )
    raise FormatError(f"{name}: empty file")


def _complete_lines(name: str, text: str) -> list[tuple[int, dict[str, Any]]]:
    """Parsed records; a last line without its newline is a torn write and is skipped."""
    lines = text.split("\n")
    torn_tail = not text.endswith("\n")
    records: list[tuple[int, dict[str, Any]]] = []
    for index, line in enumerate(lines):
        lineno = index + 1
        is_last = index == len(lines) - 1
        if not line.strip():
            continue
        if is_last and torn_tail:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # torn by a crash mid-write
        else:
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FormatError(
                    f"{name}:{lineno}: invalid JSON (col {exc.colno}): {exc.msg}"
                ) from exc
        if not isinstance(record, dict):
            raise FormatError(f"{name}:{lineno}: a record must be a JSON object")
        records.append((lineno, record))
    return records


# --- OpenRath v1 session logs -------------------------------------------------------------------


@dataclass
class V1Session:
    name: str
    header: dict[str, Any]
    rows: list[dict[str, Any]]
    trailer: dict[str, Any] | None
    partial: bool

    @property
    def id(self) -> str:
        return str(self.header["id"])

    @property
    def parents(self) -> list[str]:
        return [str(p) for p in self.header.get("parent_session_ids") or []]

    @property
    def incomplete(self) -> bool:
        return self.trailer is None


def parse_v1_session(name: str, text: str) -> V1Session:
    header: dict[str, Any] | None = None
    rows: list[dict[str, Any]] = []
    trailer: dict[str, Any] | None = None
    for lineno, record in _complete_lines(name, text):
        kind = record.get("record_type")
        if kind == "header":
            if header is not None:
                raise FormatError(f"{name}:{lineno}: duplicate header record")
            version = record.get("schema_version")
            if version != V1_SCHEMA_VERSION:
                raise FormatError(f"{name}:{lineno}: unsupported schema_version={version!r}")
            if not isinstance(record.get("id"), str):
                raise FormatError(f"{name}:{lineno}: malformed header record: no id")
            header = record
        elif kind == "chunk":
            if header is None:
                raise FormatError(f"{name}:{lineno}: chunk record before header")
            if record.get("kind") not in V1_CHUNK_KINDS:
                raise FormatError(f"{name}:{lineno}: invalid chunk kind: {record.get('kind')!r}")
            if not isinstance(record.get("payload"), dict):
                raise FormatError(f"{name}:{lineno}: chunk payload must be a JSON object")
            rows.append({"kind": record["kind"], "payload": record["payload"]})
        elif kind == "trailer":
            trailer = record
        else:
            raise FormatError(f"{name}:{lineno}: unknown record_type={kind!r}")
    if header is None:
        raise FormatError(f"{name}: no header record found")
    return V1Session(
        name=name, header=header, rows=rows, trailer=trailer, partial=name.endswith(".__partial__")
    )


def _maybe_json(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text


def v1_row_to_chunks(row: dict[str, Any]) -> list[dict[str, Any]]:
    """One v1 row as our chunks (an assistant turn with tool calls becomes a message chunk and
    one ``tool_call`` chunk per call)."""
    kind, payload = row["kind"], row["payload"]
    if kind in ("system", "user"):
        return [
            {
                "role": kind,
                "kind": "message",
                "content": {"text": str(payload.get("content") or "")},
            }
        ]
    if kind == "assistant":
        out: list[dict[str, Any]] = []
        calls = payload.get("tool_calls") or []
        text = payload.get("content")
        if text or not calls:
            out.append({"role": "assistant", "kind": "message", "content": {"text": text or ""}})
        for call in calls:
            function = call.get("function") or {}
            out.append(
                {
                    "role": "assistant",
                    "kind": "tool_call",
                    "content": {
                        "id": str(call.get("id") or ""),
                        "name": str(function.get("name") or ""),
                        "arguments": _maybe_json(function.get("arguments", "{}")),
                    },
                }
            )
        return out
    output = _maybe_json(payload.get("content"))
    content: dict[str, Any] = {
        "tool_call_id": str(payload.get("tool_call_id") or ""),
        "name": str(payload.get("name") or ""),
        "output": output,
    }
    if isinstance(output, dict) and output.get("ok") is False:
        content["error"] = str(output.get("message") or output.get("error_kind") or "error")
    return [{"role": "tool", "kind": "tool_result", "content": content}]


def v1_usage(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    return {
        key: int(value.get(key) or 0)
        for key in ("prompt_tokens", "completion_tokens", "total_tokens")
    }


def parse_v1_lineage(name: str, text: str) -> list[dict[str, Any]]:
    rows = []
    for lineno, record in _complete_lines(name, text):
        if not isinstance(record.get("id"), str):
            raise FormatError(f"{name}:{lineno}: lineage row without an id")
        rows.append(record)
    return rows


# --- Our export format ---------------------------------------------------------------------------


@dataclass
class ExportDocument:
    header: dict[str, Any]
    sessions: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)


def parse_export(name: str, text: str) -> ExportDocument:
    document: ExportDocument | None = None
    trailer: dict[str, Any] | None = None
    for lineno, record in _complete_lines(name, text):
        kind = record.get("type")
        if kind == "header":
            if document is not None:
                raise FormatError(f"{name}:{lineno}: duplicate header")
            if record.get("version") != EXPORT_VERSION:
                raise FormatError(f"{name}:{lineno}: unsupported version {record.get('version')!r}")
            document = ExportDocument(header=record)
            continue
        if document is None:
            raise FormatError(f"{name}:{lineno}: record before the header")
        if trailer is not None:
            raise FormatError(f"{name}:{lineno}: record after the trailer")
        if kind == "session":
            document.sessions.append(record)
        elif kind == "edge":
            document.edges.append(record)
        elif kind == "chunk":
            document.chunks.append(record)
        elif kind == "trailer":
            trailer = record
        else:
            raise FormatError(f"{name}:{lineno}: unknown record type {kind!r}")
    if document is None:
        raise FormatError(f"{name}: no header")
    if trailer is None:
        raise FormatError(f"{name}: truncated export (no trailer)")
    counts = (len(document.sessions), len(document.edges), len(document.chunks))
    expected = (trailer.get("sessions"), trailer.get("edges"), trailer.get("chunks"))
    if counts != expected:
        raise FormatError(
            f"{name}: the trailer announces {expected} sessions/edges/chunks, "
            f"the file holds {counts}"
        )
    return document


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"
