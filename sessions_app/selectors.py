"""Scoped reads of sessions, their logical chunk lists and their lineage.

The logical chunk list of a session spans its base chain; one recursive CTE resolves the chain
and reads the page, so a page costs one round trip whatever the fork depth (PostgreSQL and
SQLite alike).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, F, FloatField, OuterRef, Prefetch, Q, QuerySet, Sum

from openrath_project.errors import NotFound
from openrath_project.prepared import PreparedQuery
from openrath_project.tenancy.models import Project
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import parse_uuid
from sessions_app.chunk_rules import MAX_SEQ
from sessions_app.models import Chunk, LineageEdge, Session
from sessions_app.segments import ChainLink

S = Session._meta.db_table
C = Chunk._meta.db_table
E = LineageEdge._meta.db_table

#: Most sessions a lineage query returns in one page.
MAX_LINEAGE_PAGE = 500


def db_uuid(value: uuid.UUID | str) -> Any:
    """A UUID as the database driver wants it in raw SQL (hex text on SQLite)."""
    return Session._meta.pk.get_db_prep_value(uuid.UUID(str(value)), connection)


def with_parents(queryset: QuerySet[Session]) -> QuerySet[Session]:
    """Prefetch lineage parents (one extra query for any number of sessions)."""
    return queryset.prefetch_related(
        Prefetch(
            "parent_edges",
            # scope: the edges into sessions of ``queryset``, which the caller scoped
            queryset=LineageEdge.objects.unscoped().order_by("position", "id"),
            to_attr="prefetched_parent_edges",
        )
    )


def session_parent_ids(session_id: uuid.UUID) -> tuple[uuid.UUID, ...]:
    """A session's lineage parents in order (a ``detach`` edge records a source, not a parent).
    Edges are written once with their child, so the answer never changes."""
    return tuple(
        LineageEdge.objects.unscoped()  # scope: by the id of a session the caller holds
        .filter(child_id=session_id)
        .exclude(op="detach")
        .order_by("position", "id")
        .values_list("parent_id", flat=True)
    )


def session_list(*, principal: Principal) -> QuerySet[Session]:
    """Sessions in the principal's tenant and projects."""
    return with_parents(Session.objects.for_principal(principal))


#: ``session_get`` without the parents, compiled once (openrath_project/prepared.py).
_SESSION_BY_ID: PreparedQuery[Session] = PreparedQuery(
    Session,
    lambda principal, session_id: (
        session_list(principal=principal).prefetch_related(None).filter(id=session_id)
    ),
    principal=Principal,
    session_id=uuid.UUID,
)


#: The same with the session's project joined in (the chunk endpoints' one read).
_SESSION_AND_PROJECT_BY_ID: PreparedQuery[Session] = PreparedQuery(
    Session,
    lambda principal, session_id: (
        session_list(principal=principal)
        .prefetch_related(None)
        .select_related("project")
        .filter(id=session_id)
    ),
    principal=Principal,
    session_id=uuid.UUID,
)


def session_with_project(*, principal: Principal, session_id: uuid.UUID) -> Session | None:
    """A session in scope with its project loaded, without the parents; ``None`` when there is
    none (another tenant's included). One query, compiled once per process."""
    return _SESSION_AND_PROJECT_BY_ID.first(principal=principal, session_id=session_id)


def session_get(*, principal: Principal, session_id: object, lineage: bool = True) -> Session:
    """A session in scope, or 404 (also for other tenants' sessions: existence never leaks).
    ``lineage=False`` skips the parents' prefetch, for a caller that reads none (a run start:
    one query less a run POST)."""
    as_uuid = parse_uuid(session_id)
    session = None
    if as_uuid is not None:
        if lineage:
            session = session_list(principal=principal).filter(id=as_uuid).first()
        else:
            session = _SESSION_BY_ID.first(principal=principal, session_id=as_uuid)
    if session is None:
        raise NotFound("session not found", details={"session": str(session_id)})
    return session


def sessions_with_agent(queryset: QuerySet[Session], agent: str) -> QuerySet[Session]:
    """Sessions an agent produced or wrote chunks into."""
    # scope: a subquery of the rows of ``queryset``, which the caller scoped
    wrote = Chunk.objects.unscoped().filter(session_id=OuterRef("pk"), agent=agent)
    return queryset.filter(Q(agent=agent) | Exists(wrote))


def session_chain(session_id: uuid.UUID) -> list[ChainLink]:
    """The base chain from the session to its root, in one query."""
    sql = f"""
        WITH RECURSIVE chain(id, base_id, base_len, own_len, depth) AS (
            SELECT id, base_id, base_len, own_len, 0 FROM {S} WHERE id = %s
            UNION ALL
            SELECT s.id, s.base_id, s.base_len, s.own_len, chain.depth + 1
            FROM {S} s JOIN chain ON s.id = chain.base_id
        )
        SELECT id, base_id, base_len, own_len FROM chain ORDER BY depth
    """  # noqa: S608 - table names come from model metadata, values are parameters
    with connection.cursor() as cursor:
        cursor.execute(sql, [db_uuid(session_id)])
        rows = cursor.fetchall()
    return [
        ChainLink(
            id=str(uuid.UUID(str(r[0]))),
            base_id=str(uuid.UUID(str(r[1]))) if r[1] is not None else None,
            base_len=int(r[2]),
            own_len=int(r[3]),
        )
        for r in rows
    ]


def chunk_page(
    session_id: uuid.UUID, *, after: int = -1, limit: int = 100, upto: int | None = None
) -> list[Chunk]:
    """Logical chunks with ``after < seq < upto`` (``upto`` defaults to the current length),
    in order, at most ``limit``. One round trip, whatever the depth of the base chain."""
    upper = "%s" if upto is not None else "s.base_len + s.own_len"
    sql = f"""
        WITH RECURSIVE chain(id, base_id, base_len, cap) AS (
            SELECT s.id, s.base_id, s.base_len, {upper} FROM {S} s WHERE s.id = %s
            UNION ALL
            SELECT s.id, s.base_id, s.base_len,
                   CASE WHEN chain.base_len < chain.cap THEN chain.base_len ELSE chain.cap END
            FROM {S} s JOIN chain ON s.id = chain.base_id
            WHERE chain.base_len > 0
        )
        SELECT c.* FROM {C} c JOIN chain ON c.session_id = chain.id
        WHERE c.seq >= chain.base_len AND c.seq < chain.cap AND c.seq > %s AND c.seq <= %s
        ORDER BY c.seq
        LIMIT %s
    """  # noqa: S608 - table names come from model metadata, values are parameters
    # Logical positions are contiguous, so the page is exactly (after, after + limit]: every
    # segment's index range scan reads only rows of the page, whatever the list's length.
    # No position passes MAX_SEQ, so clamping changes no page; it keeps every parameter in
    # SQLite's 64-bit INTEGER range whoever calls (the console passes ?after= through).
    after = max(-MAX_SEQ - 1, min(after, MAX_SEQ))
    limit = min(limit, MAX_SEQ)
    params: list[Any] = [min(upto, MAX_SEQ)] if upto is not None else []
    params += [db_uuid(session_id), after, after + limit, limit]
    # scope: the chunks of a session the caller read in scope (by its id)
    return list(Chunk.objects.unscoped().raw(sql, params))


def chunk_all(session_id: uuid.UUID, *, upto: int | None = None, page: int = 1000) -> list[Chunk]:
    """The whole logical list (for exports and merges), read page by page."""
    out: list[Chunk] = []
    after = -1
    while True:
        batch = chunk_page(session_id, after=after, limit=page, upto=upto)
        out.extend(batch)
        if len(batch) < page:
            return out
        after = batch[-1].seq


# --- Lineage ------------------------------------------------------------------------------------


@dataclass
class LineagePage:
    nodes: list[Session]
    edges: list[LineageEdge]
    next_after: str | None


_DIRECTION_SQL = {
    # Ancestors follow edges upwards; a detach starts a new root, so it is not crossed.
    "ancestors": f"""
        WITH RECURSIVE walk(id) AS (
            SELECT CAST(%s AS {{uuid}})
            UNION
            SELECT e.parent_id FROM {E} e JOIN walk ON e.child_id = walk.id
            WHERE e.tenant_id = %s AND e.op <> 'detach'
        ) SELECT id FROM walk
    """,  # noqa: S608
    "descendants": f"""
        WITH RECURSIVE walk(id) AS (
            SELECT CAST(%s AS {{uuid}})
            UNION
            SELECT e.child_id FROM {E} e JOIN walk ON e.parent_id = walk.id
            WHERE e.tenant_id = %s AND e.op <> 'detach'
        ) SELECT id FROM walk
    """,  # noqa: S608
    # The connected graph crosses every edge in both directions.
    "graph": f"""
        WITH RECURSIVE walk(id) AS (
            SELECT CAST(%s AS {{uuid}})
            UNION
            SELECT CASE WHEN e.parent_id = walk.id THEN e.child_id ELSE e.parent_id END
            FROM {E} e JOIN walk ON (e.parent_id = walk.id OR e.child_id = walk.id)
            WHERE e.tenant_id = %s
        ) SELECT id FROM walk
    """,  # noqa: S608
}

LINEAGE_DIRECTIONS = tuple(_DIRECTION_SQL)


def lineage_ids(session: Session, direction: str = "graph") -> list[uuid.UUID]:
    """Ids of the session and its ancestors, descendants or whole connected graph (1 query)."""
    uuid_type = "uuid" if connection.vendor == "postgresql" else "char(32)"
    sql = _DIRECTION_SQL[direction].replace("{uuid}", uuid_type)
    with connection.cursor() as cursor:
        cursor.execute(sql, [db_uuid(session.id), db_uuid(session.tenant_id)])
        return [uuid.UUID(str(row[0])) for row in cursor.fetchall()]


def lineage_page(
    session: Session, *, direction: str = "graph", limit: int = 200, after: str | None = None
) -> LineagePage:
    """A page of the lineage graph: sessions ordered by id (creation order), and every edge
    that points into a session of the page. Three queries whatever the depth or size."""
    ids = lineage_ids(session, direction)
    # scope: the lineage of a session the caller read in scope; edges never leave its project
    in_graph = Session.objects.unscoped().filter(id__in=ids, tenant_id=session.tenant_id)
    nodes_qs = with_parents(in_graph)
    after_id = parse_uuid(after) if after else None
    if after_id is not None:
        nodes_qs = nodes_qs.filter(id__gt=after_id)
    nodes = list(nodes_qs.order_by("id")[: limit + 1])
    has_more = len(nodes) > limit
    nodes = nodes[:limit]
    id_set = set(ids)
    edges = [
        edge
        for node in nodes
        for edge in node.prefetched_parent_edges  # type: ignore[attr-defined]
        if edge.parent_id in id_set
    ]
    return LineagePage(nodes=nodes, edges=edges, next_after=str(nodes[-1].id) if has_more else None)


# --- Usage --------------------------------------------------------------------------------------


#: The token sums are taken in two parts, ``x // 10**9`` and ``x % 10**9``: SQLite's SUM of
#: integers raises "integer overflow" past 2^63 (the project page was a permanent 503), and the
#: parts cannot overflow for any number of sessions a database can hold.
_SPLIT = 10**9


def project_usage(project: Project) -> dict[str, int | float]:
    """Everything the project's sessions spent (each chunk counted once: forks share, merges
    copy without spending). Exact on both engines, whatever the totals."""
    sums: dict[str, Any] = {"sessions": Count("id")}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        column = F(f"usage_{key}")
        sums[f"{key}_high"] = Sum(column / _SPLIT)
        sums[f"{key}_low"] = Sum(column % _SPLIT)
    # As a float: SQLite's decimal converter refuses sums beyond the column's 20 digits.
    sums["cost_usd"] = Sum("usage_cost_usd", output_field=FloatField())
    # scope: the sessions of a project the caller read in scope
    totals = Session.objects.unscoped().filter(project=project).aggregate(**sums)
    usage: dict[str, int | float] = {
        key: int(totals[f"{key}_high"] or 0) * _SPLIT + int(totals[f"{key}_low"] or 0)
        for key in ("prompt_tokens", "completion_tokens", "total_tokens")
    }
    usage["cost_usd"] = float(totals["cost_usd"] or 0)
    usage["sessions"] = int(totals["sessions"] or 0)
    return usage


def chunk_artifact(session: Session, digest: str) -> dict[str, Any] | None:
    """The reference to artifact ``digest`` in one of the session's chunks (an ``artifact``
    chunk, or a ``tool_result`` whose whole output was kept), or ``None``.

    Only references the product recorded count: clients cannot write them (the API refuses
    them, ``chunk_rules.check_client_chunk``), and chunks an import brought in are history
    whose artifacts were not imported, so a digest copied into an import file reads nothing.
    """
    found: list[tuple[uuid.UUID, dict[str, Any]]] = []
    for chunk in chunk_all(session.id, upto=session.length):
        if chunk.kind not in ("artifact", "tool_result") or not isinstance(chunk.content, dict):
            continue
        ref = chunk.content if chunk.kind == "artifact" else chunk.content.get("artifact")
        if isinstance(ref, dict) and ref.get("digest") == digest:
            found.append((chunk.session_id, ref))
    if not found:
        return None
    imported = set(
        # scope: the sessions of the base chain of ``session``, which the caller read in scope
        Session.objects.unscoped()
        .filter(id__in={stored_in for stored_in, _ in found})
        .filter(provenance__has_key="format")
        .values_list("id", flat=True)
    )
    return next((ref for stored_in, ref in found if stored_in not in imported), None)


def lineage_node_agents(
    principal: Principal, session_ids: list[Any]
) -> dict[str, list[dict[str, Any]]]:
    """Per session, the agents that wrote its own chunks (``branch`` copies of a merge left
    out), most chunks first: ``{id: [{"agent", "chunks"}, ...]}``, the context
    ``sessions_app.api.serializers.LineageNodeOut`` reads. One query, scoped to the principal."""
    rows = (
        Chunk.objects.for_principal(principal)
        .filter(session_id__in=session_ids, branch="")
        .exclude(agent="")
        .values("session_id", "agent")
        .annotate(chunks=Count("id"))
        .order_by()
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        found.setdefault(str(row["session_id"]), []).append(
            {"agent": row["agent"], "chunks": row["chunks"]}
        )
    for agents in found.values():
        agents.sort(key=lambda a: (-a["chunks"], a["agent"]))
    return found
