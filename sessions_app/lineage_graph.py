"""The session graph as OpenRath's library shows it: lineage kinds, traversals over
``parent_session_ids``, a journal of the sessions made inside a block, and a process-wide
registry of live session values. Pure Python: no Django import.

Ours is stored: every session and every lineage edge is a database row written by the
services, so nothing here *records* lineage. These helpers read the ``parent_session_ids`` of
the session values they are given (any object with ``id`` and ``parent_session_ids``), exactly
as OpenRath's do, and the journal only notes which values were made while it was attached.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from weakref import WeakValueDictionary

__all__ = [
    "FrozenLineageView",
    "LineageConsistencyError",
    "LineageJournal",
    "LineageKind",
    "SessionRegistry",
    "ancestors_bfs",
    "descendants_dfs_preorder",
    "edge_pairs",
    "export_jsonl_string",
    "journal_record",
    "lineage_journal_optional",
    "lineage_journal_tracking",
    "lineage_view_dataclass",
    "session_registry",
    "session_to_jsonl_row",
    "validate_acyclic",
]


class LineageKind(StrEnum):
    """How a session came to be (OpenRath's names; see docs/migrating-from-openrath.md)."""

    UNKNOWN = "unknown"
    LEAF_USER = "leaf_user"
    LEAF_SYSTEM = "leaf_system"
    OP_CREATE = "op_create"
    OP_SESSION_LOOP = "op_session_loop"
    OP_FORK = "op_fork"
    OP_DETACH = "op_detach"
    OP_MERGE = "op_merge"
    OP_SESSION_COMPRESS = "op_session_compress"
    OP_IMPORT = "op_import"


class LineageConsistencyError(ValueError):
    """A parent id that is not in the mapping given, or a cycle."""


@runtime_checkable
class LineageCarrier(Protocol):
    @property
    def id(self) -> uuid.UUID: ...

    @property
    def parent_session_ids(self) -> tuple[uuid.UUID, ...]: ...


# --- Traversals --------------------------------------------------------------------------------


def ancestors_bfs(by_id: Mapping[uuid.UUID, Any], start_id: uuid.UUID) -> tuple[uuid.UUID, ...]:
    """Every ancestor of ``start_id``, breadth first (parents, then grandparents), each once.

    Every id met must be a key of ``by_id`` (``LineageConsistencyError`` otherwise)."""
    if start_id not in by_id:
        raise LineageConsistencyError(f"session {start_id} is not in the graph given")
    seen: set[uuid.UUID] = set()
    ordered: list[uuid.UUID] = []
    pending = deque(by_id[start_id].parent_session_ids)
    while pending:
        current = pending.popleft()
        if current in seen:
            continue
        if current not in by_id:
            raise LineageConsistencyError(
                f"ancestor {current} of {start_id} is not in the graph given"
            )
        seen.add(current)
        ordered.append(current)
        pending.extend(by_id[current].parent_session_ids)
    return tuple(ordered)


def _children(by_id: Mapping[uuid.UUID, Any]) -> dict[uuid.UUID, list[uuid.UUID]]:
    children: dict[uuid.UUID, list[uuid.UUID]] = {}
    for child_id, node in by_id.items():
        for parent_id in node.parent_session_ids:
            children.setdefault(parent_id, []).append(child_id)
    return children


def descendants_dfs_preorder(
    by_id: Mapping[uuid.UUID, Any], root_id: uuid.UUID
) -> tuple[uuid.UUID, ...]:
    """Every descendant of ``root_id``, depth first, a node before its children, each once.

    The order is OpenRath's: the root's own children are taken last first, every deeper
    level first to last (in the mapping's order)."""
    if root_id not in by_id:
        raise LineageConsistencyError(f"session {root_id} is not in the graph given")
    children = _children(by_id)
    visited: dict[uuid.UUID, None] = {}
    stack = list(children.get(root_id, []))
    while stack:
        current = stack.pop()
        if current in visited:
            continue
        visited[current] = None
        stack.extend(reversed(children.get(current, [])))
    return tuple(visited)


def edge_pairs(by_id: Mapping[uuid.UUID, Any]) -> Iterator[tuple[uuid.UUID, uuid.UUID]]:
    """``(parent, child)`` for every parent link of every session in the mapping."""
    for child_id, node in by_id.items():
        for parent_id in node.parent_session_ids:
            yield parent_id, child_id


def validate_acyclic(by_id: Mapping[uuid.UUID, Any]) -> None:
    """``LineageConsistencyError`` when a parent is missing from the mapping or the links
    form a cycle (stored lineage cannot cycle: a child is always created after its parents)."""
    for child_id, node in by_id.items():
        for parent_id in node.parent_session_ids:
            if parent_id not in by_id:
                raise LineageConsistencyError(f"{child_id} has a parent {parent_id} not given")
    done: set[uuid.UUID] = set()
    for start in by_id:
        if start in done:
            continue
        # Iterative depth-first walk up the parent links; "on_path" finds back edges.
        on_path: set[uuid.UUID] = {start}
        stack: list[tuple[uuid.UUID, Iterator[uuid.UUID]]] = [
            (start, iter(by_id[start].parent_session_ids))
        ]
        while stack:
            node_id, parents = stack[-1]
            step = next(parents, None)
            if step is None:
                stack.pop()
                on_path.discard(node_id)
                done.add(node_id)
                continue
            if step in on_path:
                raise LineageConsistencyError(f"the parent links cycle through session {step}")
            if step not in done:
                on_path.add(step)
                stack.append((step, iter(by_id[step].parent_session_ids)))


@dataclass(frozen=True, slots=True)
class FrozenLineageView:
    """The lineage fields of one session, detached from it."""

    session_id: uuid.UUID
    parent_session_ids: tuple[uuid.UUID, ...]
    lineage_operator: str
    lineage_kind_str: str
    lineage_extras: tuple[tuple[str, object], ...]


def lineage_view_dataclass(carrier: object) -> FrozenLineageView:
    if not isinstance(carrier, LineageCarrier):
        raise TypeError("expected an object with id and parent_session_ids")
    kind = getattr(carrier, "lineage_kind", None)
    return FrozenLineageView(
        session_id=carrier.id,
        parent_session_ids=tuple(carrier.parent_session_ids),
        lineage_operator=str(getattr(carrier, "lineage_operator", "")),
        lineage_kind_str=str(getattr(kind, "value", kind)),
        lineage_extras=tuple(tuple(pair) for pair in getattr(carrier, "lineage_extras", ())),
    )


# --- Journal -----------------------------------------------------------------------------------


@dataclass(slots=True)
class LineageJournal:
    """The ids of the sessions made (forked, detached, merged, created by kind, produced by an
    agent) while the journal was attached, in order. Readable after the block ends."""

    visit_order: list[uuid.UUID] = field(default_factory=list)

    def record(self, session_id: uuid.UUID) -> None:
        self.visit_order.append(session_id)


_journal: ContextVar[LineageJournal | None] = ContextVar("openrath_lineage_journal", default=None)


def lineage_journal_optional() -> LineageJournal | None:
    return _journal.get()


@contextmanager
def lineage_journal_tracking(*, journal: LineageJournal | None = None) -> Iterator[LineageJournal]:
    """Attach a journal (a new one unless given) for the block and yield it."""
    attached = journal if journal is not None else LineageJournal()
    token = _journal.set(attached)
    try:
        yield attached
    finally:
        _journal.reset(token)


def journal_record(session_id: uuid.UUID) -> None:
    """Note a newly made session in the attached journal, if any."""
    attached = _journal.get()
    if attached is not None:
        attached.record(session_id)


# --- Registry ----------------------------------------------------------------------------------


class SessionRegistry:
    """Session values by id, held weakly (a value nobody holds any more drops out), plus the
    id of the active one. Thread-safe."""

    def __init__(self) -> None:
        self._by_id: WeakValueDictionary[uuid.UUID, Any] = WeakValueDictionary()
        self._active_id: uuid.UUID | None = None
        self._lock = threading.Lock()

    def register(self, session: Any) -> None:
        with self._lock:
            self._by_id[session.id] = session

    def get(self, session_id: uuid.UUID) -> Any | None:
        with self._lock:
            return self._by_id.get(session_id)

    def set_active(self, session: Any | None) -> None:
        with self._lock:
            self._active_id = None if session is None else session.id

    def get_active_id(self) -> uuid.UUID | None:
        with self._lock:
            return self._active_id


_registry = SessionRegistry()


def session_registry() -> SessionRegistry:
    """The process's registry."""
    return _registry


# --- JSONL rows ----------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


def session_to_jsonl_row(session: Any) -> dict[str, Any]:
    """One session as an OpenRath lineage row (structure only, no content)."""
    usage = session.cumulative_usage
    kind = session.lineage_kind
    return {
        "id": str(session.id),
        "parent_session_ids": [str(p) for p in session.parent_session_ids],
        "lineage_operator": session.lineage_operator,
        "lineage_kind": str(getattr(kind, "value", kind)),
        "lineage_extras": [[str(k), _jsonable(v)] for k, v in session.lineage_extras],
        "chunk_count": len(session.chunk_table.rows),
        "cumulative_usage": None if usage is None else usage.as_dict(),
    }


def export_jsonl_string(sessions: Iterable[Any]) -> str:
    lines = [json.dumps(session_to_jsonl_row(s), ensure_ascii=False) for s in sessions]
    return "".join(line + "\n" for line in lines)


def write_jsonl(sessions: Iterable[Any], path: str | Path) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(export_jsonl_string(sessions), encoding="utf-8")


def resolve_journal(
    journal: LineageJournal,
    *,
    load: Callable[[uuid.UUID], Any | None],
    skip_unknown: bool = True,
) -> list[Any]:
    """The journal's sessions: from the registry, else ``load(id)``; an id neither knows is
    skipped (or ``KeyError`` when ``skip_unknown`` is false)."""
    found: list[Any] = []
    for session_id in journal.visit_order:
        session = _registry.get(session_id)
        if session is None:
            session = load(session_id)
        if session is None:
            if skip_unknown:
                continue
            raise KeyError(f"session {session_id} is not known")
        found.append(session)
    return found
