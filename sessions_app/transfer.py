"""Export a session graph as JSONL, and import ours or OpenRath v1's (historical, untrusted).

An import is one transaction: a file that cannot be read changes nothing. Imported sessions
have no placement (a file's ``placement`` is dropped, noted as ``placement_dropped`` in the
provenance): the code that later works on them places them with ``session.to()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from openrath_project.errors import PayloadTooLarge, ValidationFailed
from openrath_project.tenancy.models import Project
from sessions_app import selectors
from sessions_app.chunk_rules import ChunkDraft, ChunkInvalid, make_draft
from sessions_app.formats import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    V1_KIND_OPS,
    FormatError,
    V1Session,
    detect_format,
    dumps,
    parse_export,
    parse_v1_lineage,
    parse_v1_session,
    v1_row_to_chunks,
    v1_usage,
)
from sessions_app.models import EDGE_OPS, SESSION_OPS, Chunk, LineageEdge, Session

MAX_EXPORT_SESSIONS = 5000


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _session_record(session: Session, base: str | None, base_len: int, own_len: int) -> dict:
    return {
        "type": "session",
        "id": str(session.id),
        "title": session.title,
        "op": session.op,
        "base": base,
        "base_len": base_len,
        "own_len": own_len,
        "placement": session.placement,
        "metadata": session.metadata,
        "provenance": session.provenance,
        "incomplete": session.incomplete,
        "usage": session.usage,
        "created_by": session.created_by,
        "agent": session.agent,
        "workflow": session.workflow,
        "run": str(session.run_id) if session.run_id else None,
        "step": session.step,
        "created_at": _iso(session.created_at),
    }


def _chunk_record(chunk: Chunk, session_id: str) -> dict[str, Any]:
    return {
        "type": "chunk",
        "session": session_id,
        "seq": chunk.seq,
        "role": chunk.role,
        "kind": chunk.kind,
        "content": chunk.content,
        "agent": chunk.agent,
        "workflow": chunk.workflow,
        "run": str(chunk.run_id) if chunk.run_id else None,
        "step": chunk.step,
        "tool_call_id": chunk.tool_call_id,
        "trust": chunk.trust,
        "usage": chunk.usage,
        "branch": chunk.branch,
        "created_at": _iso(chunk.created_at),
    }


def _topological(sessions: list[Session], edges: list[LineageEdge]) -> list[Session]:
    """Bases and lineage parents before their children (ids alone do not promise it across
    processes), otherwise in id order."""
    by_id = {s.id: s for s in sessions}
    before: dict[uuid.UUID, set[uuid.UUID]] = {s.id: set() for s in sessions}
    for s in sessions:
        if s.base_id in by_id:
            before[s.id].add(s.base_id)
    for edge in edges:
        before[edge.child_id].add(edge.parent_id)
    ordered: list[Session] = []
    done: set[uuid.UUID] = set()
    for s in sessions:
        stack = [(s.id, False)]
        while stack:
            node, expanded = stack.pop()
            if node in done:
                continue
            if expanded:
                done.add(node)
                ordered.append(by_id[node])
                continue
            stack.append((node, True))
            stack.extend((p, False) for p in sorted(before[node], reverse=True) if p not in done)
    return ordered


def export_graph(session: Session) -> Iterator[str]:
    """The connected lineage graph of ``session``: every session, edge and stored chunk."""
    ids = selectors.lineage_ids(session, "graph")
    if len(ids) > MAX_EXPORT_SESSIONS:
        raise PayloadTooLarge(
            f"the lineage graph has {len(ids)} sessions; exports hold at most {MAX_EXPORT_SESSIONS}"
        )
    exported = set(ids)
    edges = list(
        LineageEdge.objects.filter(child_id__in=exported, parent_id__in=exported).order_by(
            "child_id", "position"
        )
    )
    sessions = _topological(list(Session.objects.filter(id__in=ids).order_by("id")), edges)
    yield dumps(
        {
            "type": "header",
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "exported_at": timezone.now().isoformat(),
            "root": str(session.id),
        }
    )
    chunk_count = 0
    for s in sessions:
        if s.base_id is not None and s.base_id not in exported:
            # Its base is outside the graph: write its whole logical list as its own.
            yield dumps(_session_record(s, None, 0, s.length))
            for chunk in selectors.chunk_all(s.id):
                chunk_count += 1
                yield dumps(_chunk_record(chunk, str(s.id)))
            continue
        yield dumps(
            _session_record(s, str(s.base_id) if s.base_id else None, s.base_len, s.own_len)
        )
        for chunk in Chunk.objects.filter(session=s).order_by("seq").iterator(chunk_size=1000):
            chunk_count += 1
            yield dumps(_chunk_record(chunk, str(s.id)))
    for edge in edges:
        yield dumps(
            {
                "type": "edge",
                "parent": str(edge.parent_id),
                "child": str(edge.child_id),
                "op": edge.op,
                "at": edge.parent_len,
                "position": edge.position,
                "agent": edge.agent,
                "workflow": edge.workflow,
                "run": str(edge.run_id) if edge.run_id else None,
                "step": edge.step,
                "created_at": _iso(edge.created_at),
            }
        )
    yield dumps(
        {"type": "trailer", "sessions": len(sessions), "edges": len(edges), "chunks": chunk_count}
    )


# --- Import ---------------------------------------------------------------------------------------


@dataclass
class ImportResult:
    sessions: list[Session] = field(default_factory=list)
    #: original id -> new session
    mapping: dict[str, Session] = field(default_factory=dict)


def _bad(message: str, name: str = "files") -> ValidationFailed:
    return ValidationFailed(message, details={name: [message]})


def _uuid_or_none(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


def _usage_fields(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return {
        "usage_prompt_tokens": prompt,
        "usage_completion_tokens": completion,
        "usage_total_tokens": int(usage.get("total_tokens") or prompt + completion),
        "usage_cost_usd": Decimal(str(usage.get("cost_usd") or 0)),
    }


def _draft(item: dict[str, Any], *, where: str, **extra: Any) -> ChunkDraft:
    try:
        return make_draft(
            role=item.get("role", ""),
            kind=item.get("kind", ""),
            content=item.get("content"),
            trust="untrusted",  # imported content is never trusted
            **extra,
        )
    except ChunkInvalid as exc:
        raise _bad(f"{where}: {exc}") from exc


def _insert_chunks(session: Session, drafts: Sequence[ChunkDraft], start: int) -> None:
    Chunk.objects.bulk_create(
        [
            Chunk(
                tenant_id=session.tenant_id,
                session=session,
                seq=start + i,
                role=d.role,
                kind=d.kind,
                content=d.content,
                agent=d.agent,
                workflow=d.workflow,
                run_id=_uuid_or_none(d.run_id),
                step=d.step,
                tool_call_id=d.tool_call_id,
                usage=d.usage,
                trust=d.trust,
                branch=d.branch,
            )
            for i, d in enumerate(drafts)
        ],
        batch_size=1000,
    )


def import_files(
    *, project: Project, files: Sequence[tuple[str, str]], created_by: str = "import"
) -> ImportResult:
    """Import files (``(name, text)`` pairs) into ``project``, all or nothing."""
    if not files:
        raise _bad("no files to import")
    exports: list[Any] = []
    v1_sessions: list[V1Session] = []
    v1_lineage: list[tuple[str, dict[str, Any]]] = []
    try:
        for name, text in files:
            kind = detect_format(name, text)
            if kind == "export":
                exports.append(parse_export(name, text))
            elif kind == "v1-session":
                v1_sessions.append(parse_v1_session(name, text))
            else:
                v1_lineage.extend((name, row) for row in parse_v1_lineage(name, text))
    except FormatError as exc:
        raise _bad(str(exc)) from exc
    result = ImportResult()
    with transaction.atomic():
        for document in exports:
            _import_export(project, document, result, created_by)
        if v1_sessions or v1_lineage:
            _import_v1(project, v1_sessions, v1_lineage, result, created_by)
    return result


def _remap_branch(branch: str, local: dict[str, Session]) -> str:
    """A merge's branch tags name parent sessions: point them at the imported copies."""
    target = local.get(branch)
    return str(target.id) if target is not None else branch


def _import_export(project: Project, document: Any, result: ImportResult, by: str) -> None:
    chunks_by_session: dict[str, list[dict[str, Any]]] = {}
    for chunk in document.chunks:
        chunks_by_session.setdefault(str(chunk.get("session")), []).append(chunk)
    has_parent = {str(e.get("child")) for e in document.edges}
    local: dict[str, Session] = {}
    for record in document.sessions:
        old = str(record.get("id"))
        op = record.get("op")
        if op not in SESSION_OPS:
            raise _bad(f"session {old}: unknown op {op!r}")
        base_old = record.get("base")
        base = local.get(str(base_old)) if base_old else None
        if base_old and base is None:
            raise _bad(f"session {old}: its base {base_old} is not earlier in the file")
        base_len = int(record.get("base_len") or 0) if base else 0
        own = sorted(chunks_by_session.get(old, []), key=lambda c: int(c.get("seq", -1)))
        expected = [base_len + i for i in range(len(own))]
        if [int(c.get("seq", -1)) for c in own] != expected:
            raise _bad(f"session {old}: chunk seqs are not contiguous from {base_len}")
        if int(record.get("own_len", len(own))) != len(own):
            raise _bad(f"session {old}: own_len does not match its chunks")
        session = Session.objects.create(
            tenant_id=project.tenant_id,
            project=project,
            title=str(record.get("title") or "")[:300],
            op=op if old in has_parent else "import",
            base=base,
            base_len=base_len,
            own_len=len(own),
            # Never the file's placement: where tools run is the operator's decision, and an
            # imported path or policy would let the file's author pick any host directory.
            placement={},
            metadata=record.get("metadata") or {},
            provenance={
                "format": EXPORT_FORMAT,
                "original_id": old,
                "original_op": op,
                "imported_at": timezone.now().isoformat(),
                "historical": True,
                **({"placement_dropped": True} if record.get("placement") else {}),
            },
            incomplete=bool(record.get("incomplete")),
            created_by=by,
            agent=str(record.get("agent") or "")[:200],
            # Exports before the workflow field have none: the session's writer is unknown.
            workflow=str(record.get("workflow") or "")[:300],
            run_id=_uuid_or_none(record.get("run")),
            step=str(record.get("step") or "")[:200],
            **_usage_fields(record.get("usage")),
        )
        drafts = [
            _draft(
                c,
                where=f"session {old} chunk {c.get('seq')}",
                agent=str(c.get("agent") or ""),
                tool_call_id=c.get("tool_call_id"),
                usage=c.get("usage"),
                branch=_remap_branch(str(c.get("branch") or ""), local),
                run_id=str(c["run"]) if c.get("run") else None,
                step=str(c.get("step") or ""),
                workflow=str(c.get("workflow") or ""),
            )
            for c in own
        ]
        _insert_chunks(session, drafts, base_len)
        local[old] = session
        result.sessions.append(session)
        result.mapping[old] = session
    for edge in document.edges:
        parent, child = local.get(str(edge.get("parent"))), local.get(str(edge.get("child")))
        if parent is None or child is None:
            raise _bad(f"edge {edge.get('parent')} -> {edge.get('child')}: unknown session")
        if edge.get("op") not in EDGE_OPS:
            raise _bad(f"edge {edge.get('parent')} -> {edge.get('child')}: unknown op")
        LineageEdge.objects.create(
            tenant_id=project.tenant_id,
            parent=parent,
            child=child,
            op=edge["op"],
            parent_len=int(edge.get("at") or 0),
            position=int(edge.get("position") or 0),
            agent=str(edge.get("agent") or "")[:200],
            workflow=str(edge.get("workflow") or "")[:300],
            run_id=_uuid_or_none(edge.get("run")),
            step=str(edge.get("step") or "")[:200],
        )


def _v1_order(files: list[V1Session]) -> list[V1Session]:
    """Parents before children (among the imported files)."""
    by_id = {f.id: f for f in files}
    ordered: list[V1Session] = []
    state: dict[str, int] = {}

    def visit(item: V1Session) -> None:
        mark = state.get(item.id)
        if mark == 2:
            return
        if mark == 1:
            raise _bad(f"{item.name}: lineage cycle through {item.id}")
        state[item.id] = 1
        for parent in item.parents:
            if parent in by_id:
                visit(by_id[parent])
        state[item.id] = 2
        ordered.append(item)

    for item in files:
        visit(item)
    return ordered


def _import_v1(
    project: Project,
    files: list[V1Session],
    lineage_rows: list[tuple[str, dict[str, Any]]],
    result: ImportResult,
    by: str,
) -> None:
    seen: dict[str, str] = {}
    for item in files:
        if item.id in seen:
            raise _bad(f"{item.name}: session {item.id} is also in {seen[item.id]}")
        seen[item.id] = item.name
    imported: dict[str, tuple[Session, list[dict[str, Any]], list[int]]] = {}
    now = timezone.now().isoformat()
    for item in _v1_order(files):
        header = item.header
        kind = str(header.get("lineage_kind") or "unknown")
        present_parents = [p for p in item.parents if p in imported]
        op = V1_KIND_OPS.get(kind, ("import", "import"))[0] if present_parents else "import"
        # Share storage with the first parent for the rows the two have in common.
        base: Session | None = None
        prefix_rows = 0
        if present_parents:
            parent_session, parent_rows, parent_marks = imported[present_parents[0]]
            while (
                prefix_rows < min(len(parent_rows), len(item.rows))
                and parent_rows[prefix_rows] == item.rows[prefix_rows]
            ):
                prefix_rows += 1
            if prefix_rows:
                base = parent_session
        base_len = imported[present_parents[0]][2][prefix_rows] if base is not None else 0
        own_drafts: list[ChunkDraft] = []
        marks = [0]  # marks[i] = logical length after the first i rows
        for index, row in enumerate(item.rows):
            chunks = v1_row_to_chunks(row)
            if index >= prefix_rows:
                own_drafts.extend(_draft(c, where=f"{item.name} chunk {index}") for c in chunks)
            marks.append(marks[-1] + len(chunks))
        first_user = next(
            (r["payload"].get("content") for r in item.rows if r["kind"] == "user"), None
        )
        trailer = item.trailer or {}
        session = Session.objects.create(
            tenant_id=project.tenant_id,
            project=project,
            title=(str(first_user)[:80] if first_user else f"OpenRath v1 {item.id[:8]}"),
            op=op,
            base=base,
            base_len=base_len,
            own_len=len(own_drafts),
            provenance={
                "format": "openrath-v1",
                "original_id": item.id,
                "file": item.name,
                "lineage_operator": header.get("lineage_operator"),
                "lineage_kind": kind,
                "lineage_extras": header.get("lineage_extras") or [],
                "parent_session_ids": item.parents,
                "sandbox_backend": header.get("sandbox_backend"),
                "sandbox_spec": header.get("sandbox_spec"),
                "created_at": header.get("created_at"),
                "closed": item.trailer is not None,
                "final_chunk_count": trailer.get("final_chunk_count"),
                "imported_at": now,
                "historical": True,
            },
            incomplete=item.incomplete,
            created_by=by,
            **_usage_fields(v1_usage(trailer.get("cumulative_usage"))),
        )
        _insert_chunks(session, own_drafts, base_len)
        edge_op = V1_KIND_OPS.get(kind, ("import", "import"))[1]
        for position, parent_id in enumerate(present_parents):
            parent_session, _, parent_marks = imported[parent_id]
            this_op = edge_op if position == 0 or edge_op == "merge" else "import"
            LineageEdge.objects.create(
                tenant_id=project.tenant_id,
                parent=parent_session,
                child=session,
                op=this_op,
                parent_len=base_len if (position == 0 and op == "fork") else parent_marks[-1],
                position=position,
            )
        imported[item.id] = (session, item.rows, marks)
        result.sessions.append(session)
        result.mapping[item.id] = session
    _import_v1_lineage(project, lineage_rows, imported, result, by)


def _import_v1_lineage(
    project: Project,
    rows: list[tuple[str, dict[str, Any]]],
    imported: dict[str, tuple[Session, list[dict[str, Any]], list[int]]],
    result: ImportResult,
    by: str,
) -> None:
    """Lineage rows carry structure without content: placeholders for sessions no file gave."""
    nodes: dict[str, Session] = {k: v[0] for k, v in imported.items()}
    now = timezone.now().isoformat()
    for name, row in rows:
        original = str(row["id"])
        if original in nodes:
            continue
        kind = str(row.get("lineage_kind") or "unknown")
        session = Session.objects.create(
            tenant_id=project.tenant_id,
            project=project,
            title=f"OpenRath v1 {original[:8]} (lineage only)",
            op="import",
            provenance={
                "format": "openrath-v1-lineage",
                "original_id": original,
                "file": name,
                "lineage_operator": row.get("lineage_operator"),
                "lineage_kind": kind,
                "lineage_extras": row.get("lineage_extras") or [],
                "parent_session_ids": row.get("parent_session_ids") or [],
                "chunk_count": row.get("chunk_count"),
                "content_included": False,
                "imported_at": now,
                "historical": True,
            },
            created_by=by,
            **_usage_fields(v1_usage(row.get("cumulative_usage"))),
        )
        nodes[original] = session
        result.sessions.append(session)
        result.mapping[original] = session
    existing = set(
        LineageEdge.objects.filter(child__in=list(nodes.values())).values_list(
            "parent_id", "child_id"
        )
    )
    for _, row in rows:
        child = nodes[str(row["id"])]
        kind = str(row.get("lineage_kind") or "unknown")
        op = V1_KIND_OPS.get(kind, ("import", "import"))[1]
        for position, parent_id in enumerate(row.get("parent_session_ids") or []):
            parent = nodes.get(str(parent_id))
            if parent is None or (parent.id, child.id) in existing or parent.id == child.id:
                continue
            LineageEdge.objects.create(
                tenant_id=project.tenant_id,
                parent=parent,
                child=child,
                op=op if position == 0 or op == "merge" else "import",
                parent_len=parent.length,
                position=position,
            )
            existing.add((parent.id, child.id))
