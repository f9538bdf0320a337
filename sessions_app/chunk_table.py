"""OpenRath's view of a transcript: ``ChunkKind``, ``ChunkRow``, ``ChunkTable`` and token usage.

OpenRath stores a session as rows of four kinds (system, user, assistant, tool result) with an
OpenAI-shaped payload; we store finer-grained chunks (an assistant message, then one
``tool_call`` chunk per call, summaries, events, artifacts). This module converts between the
two, in both directions, so ``session.chunk_table`` reads like OpenRath's and a ``ChunkTable``
can seed a new session. Pure Python: no Django import.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, overload

from sessions_app.formats import v1_row_to_chunks

__all__ = [
    "ChunkKind",
    "ChunkRow",
    "ChunkTable",
    "TokenUsage",
    "assistant_turn_chunk",
    "chunk_table_to_messages",
    "format_chunk_row_brief",
    "row_drafts",
    "rows_from_chunks",
    "system_text_chunk",
    "tool_feedback_chunk",
    "user_text_chunk",
]


class ChunkKind(StrEnum):
    """The four row kinds of an OpenRath transcript."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL_RESULT = "tool_result"


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """One transcript row: its kind and an OpenAI-shaped payload (never changed)."""

    kind: ChunkKind
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ChunkTable:
    """Rows in order. ``extend`` returns a new table (a table is a value, like a tuple)."""

    rows: tuple[ChunkRow, ...] = ()

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[ChunkRow]:
        return iter(self.rows)

    @overload
    def __getitem__(self, index: int) -> ChunkRow: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[ChunkRow, ...]: ...

    def __getitem__(self, index: int | slice) -> ChunkRow | tuple[ChunkRow, ...]:
        return self.rows[index]

    def extend(self, *more: ChunkRow) -> ChunkTable:
        return ChunkTable(rows=self.rows + tuple(more))


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Token counts (and cost) spent producing a session: ``session.cumulative_usage``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    completion_tokens_details: Mapping[str, Any] | None = field(default=None, compare=False)
    prompt_tokens_details: Mapping[str, Any] | None = field(default=None, compare=False)

    @classmethod
    def of(cls, totals: Mapping[str, Any]) -> TokenUsage:
        return cls(
            prompt_tokens=int(totals.get("prompt_tokens") or 0),
            completion_tokens=int(totals.get("completion_tokens") or 0),
            total_tokens=int(totals.get("total_tokens") or 0),
            cost_usd=float(totals.get("cost_usd") or 0.0),
        )

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
        )

    @property
    def is_zero(self) -> bool:
        return not (
            self.prompt_tokens or self.completion_tokens or self.total_tokens or self.cost_usd
        )

    def as_dict(self) -> dict[str, int]:
        """The three token counts (what OpenRath's exports carry)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


# --- Row constructors (OpenRath's helper names) ------------------------------------------------


def user_text_chunk(text: str) -> ChunkRow:
    return ChunkRow(kind=ChunkKind.USER, payload={"content": text})


def system_text_chunk(text: str) -> ChunkRow:
    return ChunkRow(kind=ChunkKind.SYSTEM, payload={"content": text})


def _call_wire(call: Any) -> dict[str, Any]:
    """A tool call in OpenAI wire form, from a dict already in that form or an object with
    ``id``, ``type`` and ``function.name`` / ``function.arguments``."""
    if isinstance(call, Mapping):
        function = call.get("function") or {}
        return {
            "id": str(call.get("id", "")),
            "type": str(call.get("type", "function")),
            "function": {
                "name": str(function.get("name", "")),
                "arguments": str(function.get("arguments", "")),
            },
        }
    function = call.function
    return {
        "id": str(call.id),
        "type": str(getattr(call, "type", "function")),
        "function": {"name": str(function.name), "arguments": str(function.arguments)},
    }


def assistant_turn_chunk(
    *, tool_calls: Sequence[Any] | None, content: str | None = None
) -> ChunkRow:
    wire = [_call_wire(c) for c in tool_calls] if tool_calls else None
    return ChunkRow(kind=ChunkKind.ASSISTANT, payload={"content": content, "tool_calls": wire})


def tool_feedback_chunk(tool_call_id: str, name: str, body: str) -> ChunkRow:
    return ChunkRow(
        kind=ChunkKind.TOOL_RESULT,
        payload={"tool_call_id": tool_call_id, "name": name, "content": body},
    )


# --- Our chunks -> OpenRath rows --------------------------------------------------------------


class ChunkLike(Protocol):
    @property
    def role(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def content(self) -> dict[str, Any]: ...


def _text(content: Mapping[str, Any]) -> str:
    value = content.get("text", "")
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _tool_body(content: Mapping[str, Any]) -> str:
    """A tool result's text as OpenRath stores it: the output (JSON unless it is text), or
    the error."""
    if content.get("error"):
        return json.dumps({"ok": False, "message": str(content["error"])}, ensure_ascii=False)
    output = content.get("output")
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def rows_from_chunks(chunks: Iterable[ChunkLike]) -> tuple[ChunkRow, ...]:
    """OpenRath rows for our chunks.

    An assistant ``message`` and the ``tool_call`` chunks after it become one assistant row
    with ``tool_calls``; a ``summary`` becomes a row of its role; ``event`` and ``artifact``
    chunks have no OpenRath counterpart and are left out.
    """
    rows: list[ChunkRow] = []
    open_turn: dict[str, Any] | None = None
    for chunk in chunks:
        content = chunk.content or {}
        if chunk.kind == "tool_call":
            call = {
                "id": str(content.get("id", "")),
                "type": "function",
                "function": {
                    "name": str(content.get("name", "")),
                    "arguments": _arguments(content.get("arguments", "")),
                },
            }
            if open_turn is None:
                open_turn = {"content": None, "tool_calls": None}
                rows.append(ChunkRow(kind=ChunkKind.ASSISTANT, payload=open_turn))
            if open_turn["tool_calls"] is None:
                open_turn["tool_calls"] = []
            open_turn["tool_calls"].append(call)
            continue
        open_turn = None
        if chunk.kind in ("message", "summary"):
            if chunk.role == "assistant":
                open_turn = {"content": _text(content), "tool_calls": None}
                rows.append(ChunkRow(kind=ChunkKind.ASSISTANT, payload=open_turn))
            elif chunk.role in ("system", "user"):
                rows.append(
                    ChunkRow(kind=ChunkKind(chunk.role), payload={"content": _text(content)})
                )
        elif chunk.kind == "tool_result":
            rows.append(
                tool_feedback_chunk(
                    str(content.get("tool_call_id", "")),
                    str(content.get("name", "")),
                    _tool_body(content),
                )
            )
    return tuple(rows)


def row_drafts(rows: Iterable[ChunkRow]) -> list[dict[str, Any]]:
    """Our chunk dicts (role, kind, content) for OpenRath rows: the inverse of
    :func:`rows_from_chunks`."""
    out: list[dict[str, Any]] = []
    for row in rows:
        if not isinstance(row, ChunkRow):
            raise TypeError(f"expected a ChunkRow, got {type(row).__name__}")
        out.extend(v1_row_to_chunks({"kind": ChunkKind(row.kind).value, "payload": row.payload}))
    return out


# --- Helpers -----------------------------------------------------------------------------------


def _one_line(text: str, limit: int) -> str:
    flat = text.replace("\r\n", "\n").replace("\n", "\\n")
    if len(flat) <= limit:
        return flat
    keep = max(1, (limit - 5) // 2)
    return f"{flat[:keep]} ... {flat[-keep:]}"


def format_chunk_row_brief(index: int, row: ChunkRow, *, max_payload: int = 400) -> str:
    """``[index] kind: summary`` on one line (for logs)."""
    payload = row.payload
    kind = ChunkKind(row.kind)
    if kind is ChunkKind.ASSISTANT:
        parts = []
        if payload.get("content"):
            parts.append(f"text={_one_line(str(payload['content']), max_payload)!r}")
        names = [
            str((c.get("function") or {}).get("name", "?")) for c in payload.get("tool_calls") or []
        ]
        if names:
            parts.append(f"tools=[{', '.join(names)}]")
        return f"[{index}] {kind.value}: {', '.join(parts) or '(empty)'}"
    if kind is ChunkKind.TOOL_RESULT:
        body = _one_line(str(payload.get("content", "")), max_payload)
        return f"[{index}] {kind.value}: name={payload.get('name', '')!r} body={body}"
    return f"[{index}] {kind.value}: {_one_line(str(payload.get('content', '')), max_payload)!r}"


def chunk_table_to_messages(table: ChunkTable) -> tuple[dict[str, Any], ...]:
    """OpenAI chat messages (plain dicts) for a table's rows."""
    messages: list[dict[str, Any]] = []
    for row in table.rows:
        kind, payload = ChunkKind(row.kind), row.payload
        if kind is ChunkKind.ASSISTANT:
            message: dict[str, Any] = {"role": "assistant", "content": payload.get("content")}
            if payload.get("tool_calls"):
                message["tool_calls"] = [dict(c) for c in payload["tool_calls"]]
            messages.append(message)
        elif kind is ChunkKind.TOOL_RESULT:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": str(payload.get("tool_call_id", "")),
                    "content": str(payload.get("content", "")),
                }
            )
        else:
            messages.append({"role": kind.value, "content": str(payload.get("content", ""))})
    return tuple(messages)
