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

from openrath_project.jsonlimits import MAX_JSON_DEPTH, JSONRefused, loads
from sessions_app.chunk_rules import MAX_SEQ, ChunkInvalid, check_session_usage

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


#: The order of a merge's parents (a small integer column).
MAX_EDGE_POSITION = 32767


class FormatError(ValueError):
    """A file that cannot be read; the message names the file and line."""


class _TornLine(ValueError):
    """A line that is not JSON (possibly cut short by a crash mid-write)."""


def _load_line(name: str, lineno: int, line: str) -> Any:
    """One line as JSON, within the domain every JSON input has (``jsonlimits``: at most
    ``MAX_JSON_DEPTH`` levels, 64-bit integers, finite numbers, storable text)."""
    try:
        return loads(line, max_depth=MAX_JSON_DEPTH)
    except JSONRefused as exc:
        raise FormatError(f"{name}:{lineno}: {exc.problem.text()}") from None
    except json.JSONDecodeError as exc:
        raise _TornLine(f"{name}:{lineno}: invalid JSON (col {exc.colno}): {exc.msg}") from None
    except ValueError as exc:  # NaN/Infinity, an integer of more than 4300 digits
        raise FormatError(f"{name}:{lineno}: invalid JSON: {exc}") from None


def _check_position(
    name: str, lineno: int, record: dict[str, Any], key: str, maximum: int = MAX_SEQ
) -> None:
    """A position or length of a record (``seq``, ``base_len``, ...): absent, null or an
    integer 0..maximum (what its column holds)."""
    value = record.get(key)
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= maximum:
        raise FormatError(f"{name}:{lineno}: {key} must be an integer between 0 and {maximum}")


def _check_usage(name: str, lineno: int, usage: Any, where: str) -> None:
    try:
        check_session_usage(usage)
    except ChunkInvalid as exc:  # exc.field is "usage.<key>"
        field = exc.field.removeprefix("usage.") if where else exc.field
        raise FormatError(f"{name}:{lineno}: {where}{field} {exc.message}") from None


def detect_format(name: str, text: str) -> str:
    """``"export"``, ``"v1-session"`` or ``"v1-lineage"``."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            first = _load_line(name, lineno, line)
        except _TornLine as exc:
            raise FormatError(str(exc)) from None
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
        try:
            record = _load_line(name, lineno, line)
        except _TornLine as exc:
            if is_last and torn_tail:
                continue  # torn by a crash mid-write
            raise FormatError(str(exc)) from None
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
            _check_usage(name, lineno, record.get("cumulative_usage"), "cumulative_usage.")
            trailer = record
        else:
            raise FormatError(f"{name}:{lineno}: unknown record_type={kind!r}")
    if header is None:
        raise FormatError(f"{name}: no header record found")
    return V1Session(
        name=name, header=header, rows=rows, trailer=trailer, partial=name.endswith(".__partial__")
    )


def _maybe_json(text: Any) -> Any:
    """A v1 tool call's arguments (or output) parsed when they are JSON in the domain, else
    the text as it is."""
    if not isinstance(text, str):
        return text
    try:
        return loads(text)
    except ValueError:  # not JSON, or outside the domain (JSONRefused): keep the text
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
        _check_usage(name, lineno, record.get("cumulative_usage"), "cumulative_usage.")
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
            _check_position(name, lineno, record, "base_len")
            _check_position(name, lineno, record, "own_len")
            _check_usage(name, lineno, record.get("usage"), "")
            document.sessions.append(record)
        elif kind == "edge":
            _check_position(name, lineno, record, "at")
            _check_position(name, lineno, record, "position", MAX_EDGE_POSITION)
            document.edges.append(record)
        elif kind == "chunk":
            if record.get("seq") is None:
                raise FormatError(f"{name}:{lineno}: a chunk record needs its seq")
            _check_position(name, lineno, record, "seq")
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
