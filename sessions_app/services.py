"""Session writes: create, append, fork, detach, merge, compress, place.

Every state change of a session goes through here (API, console, agents, runs, imports).

Locking: an append takes the session row's lock with one ``UPDATE ... RETURNING`` that also
reserves the sequence numbers, inserts the chunks and commits; concurrent appenders queue on
that row lock, so a session has one total order with no gap and no duplicate. Forks, detaches
and merges never lock their parents: positions below a length never change once written.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from openrath_project.errors import Conflict, NotFound, ValidationFailed
from openrath_project.tenancy.models import Project
from sessions_app import append_sql, context, streaming
from sessions_app.chunk_rules import (
    MAX_SESSION_COST_USD,
    MAX_SESSION_TOKENS,
    ChunkDraft,
    make_draft,
    usage_totals,
)
from sessions_app.models import USAGE_CONSTRAINT, Chunk, LineageEdge, Session
from sessions_app.segments import common_prefix_length, segments_for, shortest_base
from sessions_app.selectors import S, chunk_all, db_uuid, session_chain

#: Most chunks one append may carry.
MAX_CHUNKS_PER_APPEND = 1000
MERGE_STRATEGIES = ("concat", "summary")
#: Strategies the library offers beyond the API's: ``append`` is OpenRath's ``a.merge(b)``.
LIBRARY_MERGE_STRATEGIES = (*MERGE_STRATEGIES, "append")


class StaleFence(Conflict):
    """A run's worker lost its lease: its writes are refused (another worker owns the run)."""

    code = "stale_fence"


class SessionBusy(Conflict):
    """A run owns this session; only that run may append to it."""

    code = "session_busy"


def _ctx_fields() -> dict[str, Any]:
    ctx = context.current()
    return {"agent": ctx.agent, "workflow": ctx.workflow, "run_id": ctx.run_id, "step": ctx.step}


def _stamp(draft: ChunkDraft) -> ChunkDraft:
    """Fill the agent/workflow/run/step of the current write context where the draft leaves them
    empty."""
    ctx = context.current()
    changes: dict[str, Any] = {}
    if not draft.agent and ctx.agent:
        changes["agent"] = ctx.agent
    if draft.run_id is None and ctx.run_id is not None:
        changes["run_id"] = str(ctx.run_id)
    if not draft.step and ctx.step:
        changes["step"] = ctx.step
    if not draft.workflow and ctx.workflow:
        changes["workflow"] = ctx.workflow
    return replace(draft, **changes) if changes else draft


def _chunk_rows(session: Session, drafts: Sequence[ChunkDraft], start: int) -> list[Chunk]:
    return [
        Chunk(
            tenant_id=session.tenant_id,
            session_id=session.id,
            seq=start + offset,
            role=draft.role,
            kind=draft.kind,
            content=draft.content,
            agent=draft.agent,
            workflow=draft.workflow,
            run_id=uuid.UUID(draft.run_id) if draft.run_id else None,
            step=draft.step,
            tool_call_id=draft.tool_call_id,
            usage=draft.usage,
            trust=draft.trust,
            branch=draft.branch,
        )
        for offset, draft in enumerate(drafts)
    ]


def _publish_after_commit(session_id: uuid.UUID, chunks: list[Chunk]) -> None:
    if chunks:
        seqs = (chunks[0].seq, chunks[-1].seq)
        transaction.on_commit(lambda: streaming.chunks_committed(session_id, seqs))


# --- Create ------------------------------------------------------------------------------------


def session_create(
    *,
    project: Project,
    title: str = "",
    chunks: Sequence[ChunkDraft] = (),
    metadata: dict[str, Any] | None = None,
    placement: dict[str, Any] | None = None,
    created_by: str | None = None,
    op: str = "create",
    provenance: dict[str, Any] | None = None,
    incomplete: bool = False,
) -> Session:
    """A new root session holding ``chunks``."""
    if len(chunks) > MAX_CHUNKS_PER_APPEND:
        raise ValidationFailed(
            f"at most {MAX_CHUNKS_PER_APPEND} chunks per request",
            details={"chunks": [f"more than {MAX_CHUNKS_PER_APPEND}"]},
        )
    ctx = context.current()
    drafts = [_stamp(d) for d in chunks]
    totals = usage_totals(drafts)
    with transaction.atomic():
        session = Session.objects.create(
            tenant_id=project.tenant_id,
            project=project,
            title=title[:300],
            op=op,
            own_len=len(drafts),
            placement=placement or {},
            metadata=metadata or {},
            provenance=provenance or {},
            incomplete=incomplete,
            created_by=created_by or ctx.actor,
            usage_prompt_tokens=totals["prompt_tokens"],
            usage_completion_tokens=totals["completion_tokens"],
            usage_total_tokens=totals["total_tokens"],
            usage_cost_usd=Decimal(str(totals["cost_usd"])),
            **_ctx_fields(),
        )
        rows = Chunk.objects.bulk_create(_chunk_rows(session, drafts, 0))
        _publish_after_commit(session.id, rows)
    return session


def session_from_user_message(
    *, project: Project, text: str, title: str = "", metadata: dict[str, Any] | None = None
) -> Session:
    draft = make_draft(role="user", kind="message", content={"text": text})
    return session_create(
        project=project, title=title or text[:80], chunks=[draft], metadata=metadata
    )


# --- Append ------------------------------------------------------------------------------------

# One UPDATE reserves the sequence numbers and adds the usage: the same SET list and owner
# predicates as a run's step commit (sessions_app.append_sql), with positional parameters.
_APPEND_SQL = f"""
    UPDATE {S}
    SET {append_sql.USAGE_SET.format(n="%s", prompt="%s", completion="%s", total="%s", cost="%s")},
        updated_at = %s
    WHERE id = %s AND {{owner}}
    RETURNING base_len, own_len
"""  # noqa: S608 - the table name comes from model metadata, values are parameters
_OWNER_FREE = append_sql.OWNER_FREE
_OWNER_FENCE = append_sql.OWNER_FENCE.format(run="%s", fence="%s")


def chunks_append(
    *,
    session: Session,
    drafts: Sequence[ChunkDraft],
    fence: context.Fence | None = None,
) -> list[Chunk]:
    """Append chunks at the end of the session's log, in one short transaction.

    ``fence`` (default: the write context's) must match the run that owns the session, if one
    does; a stale worker gets :class:`StaleFence` and writes nothing.
    """
    if not drafts:
        return []
    if len(drafts) > MAX_CHUNKS_PER_APPEND:
        raise ValidationFailed(
            f"at most {MAX_CHUNKS_PER_APPEND} chunks per append",
            details={"chunks": [f"more than {MAX_CHUNKS_PER_APPEND}"]},
        )
    ctx = context.current()
    fence = fence if fence is not None else ctx.fence
    stamped = [_stamp(d) for d in drafts]
    buffer = ctx.buffer
    if buffer is not None and buffer.session_id == session.id:
        return _hold(session, buffer, stamped)
    return append_now(session, stamped, fence)


def _hold(session: Session, buffer: context.StepBuffer, stamped: list[ChunkDraft]) -> list[Chunk]:
    """A durable step's append to its working session: held, committed with the step."""
    first = buffer.add(stamped)
    now = timezone.now()
    rows = _chunk_rows(session, stamped, first)
    for row in rows:
        row.created_at = now
    if buffer.due():
        flush_buffer(session_id=session.id)
    return rows


def flush_buffer(*, session_id: uuid.UUID) -> None:
    """Write what the current step holds for ``session_id`` now (reads see their own writes)."""
    ctx = context.current()
    buffer = ctx.buffer
    if buffer is None or buffer.session_id != session_id or not buffer.drafts:
        return
    held = buffer.take()
    session = Session(id=session_id, tenant_id=buffer.tenant_id)
    stored = append_now(session, held, ctx.fence)
    expected = buffer.stored_length - len(held)
    if stored and stored[0].seq != expected:  # only this lease writes here: cannot happen
        raise StaleFence(
            "the working session changed under the step",
            details={"expected": expected, "got": stored[0].seq},
        )


def append_now(
    session: Session, stamped: list[ChunkDraft], fence: context.Fence | None
) -> list[Chunk]:
    """Write stamped drafts at the end of the session now (one short transaction)."""
    totals = usage_totals(stamped)
    params = [
        len(stamped),
        totals["prompt_tokens"],
        totals["completion_tokens"],
        totals["total_tokens"],
        Decimal(str(totals["cost_usd"])),
        timezone.now(),
        db_uuid(session.id),
    ]
    if fence is not None:
        params += [db_uuid(fence.run_id), fence.token]
    sql = _APPEND_SQL.format(owner=_OWNER_FENCE if fence is not None else _OWNER_FREE)
    with transaction.atomic():
        with connection.cursor() as cursor:
            try:
                cursor.execute(sql, params)
            except IntegrityError as exc:  # the totals would leave their domain
                if USAGE_CONSTRAINT not in str(exc):
                    raise
                raise usage_full() from exc
            row = cursor.fetchone()
        if row is None:
            _explain_refused_append(session.id, fence)
        base_len, own_len = int(row[0]), int(row[1])
        start = base_len + own_len - len(stamped)
        rows = Chunk.objects.bulk_create(_chunk_rows(session, stamped, start))
        _publish_after_commit(session.id, rows)
    session.own_len = own_len
    session.base_len = base_len
    return rows


def usage_full() -> ValidationFailed:
    """The refusal of an append whose usage totals would leave the session's domain."""
    return ValidationFailed(
        f"usage: the session's usage totals would pass their limits ({MAX_SESSION_TOKENS} "
        f"tokens, {MAX_SESSION_COST_USD} USD); nothing was appended",
        details={"usage": ["the session's totals would pass their limits"]},
    )


def _explain_refused_append(session_id: uuid.UUID, fence: context.Fence | None) -> None:
    owner = Session.objects.filter(id=session_id).values("writer_run_id", "writer_token").first()
    if owner is None:
        raise NotFound("session not found", details={"session": str(session_id)})
    if fence is not None and owner["writer_run_id"] in (fence.run_id, None):
        raise StaleFence(
            "this worker's lease on the run is stale; another worker owns it now",
            details={"run": str(fence.run_id), "token": fence.token},
        )
    raise SessionBusy(
        "a run is writing to this session; append to a fork instead",
        details={"run": str(owner["writer_run_id"])},
    )


def session_claim_writer(*, session: Session, run_id: uuid.UUID, token: int) -> bool:
    """Make ``run_id`` (with fencing token ``token``) the session's only writer.

    Succeeds when the session is free or already the run's with an older token; returns False
    when another run owns it or a newer token of this run does.
    """
    free_or_older = Q(writer_run_id__isnull=True) | Q(writer_run_id=run_id, writer_token__lte=token)
    updated = (
        Session.objects.filter(id=session.id)
        .filter(free_or_older)
        .update(writer_run_id=run_id, writer_token=token)
    )
    return bool(updated)


def session_release_writer(*, session_id: uuid.UUID, run_id: uuid.UUID) -> None:
    """The run is done with the session: anyone may append again."""
    Session.objects.filter(id=session_id, writer_run_id=run_id).update(
        writer_run_id=None, writer_token=None
    )


# --- Fork, detach -------------------------------------------------------------------------------


def _base_for(session: Session, at: int) -> tuple[uuid.UUID | None, int]:
    """Storage base of a copy of the session's first ``at`` chunks (no chunk is copied)."""
    if at == 0:
        return None, 0
    if at > session.base_len:
        return session.id, at  # the position at-1 is the session's own: no chain walk needed
    holder, length = shortest_base(session_chain(session.id), at)
    return uuid.UUID(holder), length


def _current_length(session: Session) -> int:
    """The session's length now (a fork's callers read it under the lock that orders them)."""
    flush_buffer(session_id=session.id)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT base_len, own_len FROM {S} WHERE id = %s",  # noqa: S608 - S is the table
            [db_uuid(session.id)],
        )
        row = cursor.fetchone()
    if row is None:
        raise NotFound("session not found", details={"session": str(session.id)})
    session.base_len, session.own_len = int(row[0]), int(row[1])
    return session.base_len + session.own_len


def _derived(
    *,
    parent: Session,
    op: str,
    at: int | None,
    title: str | None,
    metadata: dict[str, Any] | None,
    created_by: str | None,
) -> tuple[Session, LineageEdge]:
    """The session and the edge a fork or detach of ``parent`` writes, not yet saved."""
    length = _current_length(parent)
    if at is None:
        at = length
    if isinstance(at, bool) or not isinstance(at, int) or at < 0 or at > length:
        raise ValidationFailed(
            f"at must be between 0 and the session's length ({length})",
            details={"at": [f"out of range 0..{length}"]},
        )
    base_id, base_len = _base_for(parent, at)
    ctx = context.current()
    child = Session(
        tenant_id=parent.tenant_id,
        project_id=parent.project_id,
        title=(title if title is not None else parent.title)[:300],
        op=op,
        base_id=base_id,
        base_len=base_len,
        own_len=0,
        placement=dict(parent.placement),
        metadata=metadata or {},
        created_by=created_by or ctx.actor,
        **_ctx_fields(),
    )
    edge = LineageEdge(
        tenant_id=parent.tenant_id,
        parent=parent,
        child=child,
        op=op,
        parent_len=at,
        **_ctx_fields(),
    )
    return child, edge


def _derive(
    *,
    parent: Session,
    op: str,
    at: int | None,
    title: str | None,
    metadata: dict[str, Any] | None,
    created_by: str | None,
) -> Session:
    child, edge = _derived(
        parent=parent, op=op, at=at, title=title, metadata=metadata, created_by=created_by
    )
    # No savepoint inside a caller's transaction: nobody recovers from a failed insert here,
    # and SAVEPOINT / RELEASE would be two more round trips. An error still rolls the whole
    # transaction back.
    with transaction.atomic(savepoint=False):
        child.save(force_insert=True)
        edge.save(force_insert=True)
    return child


def session_fork(
    *,
    session: Session,
    at: int | None = None,
    title: str | None = None,
    metadata: dict[str, Any] | None = None,
    created_by: str | None = None,
) -> Session:
    """A branch that sees the first ``at`` chunks (default: all). One session row, one edge."""
    return _derive(
        parent=session, op="fork", at=at, title=title, metadata=metadata, created_by=created_by
    )


def session_fork_rows(
    *,
    session: Session,
    at: int | None = None,
    title: str | None = None,
    metadata: dict[str, Any] | None = None,
    created_by: str | None = None,
) -> tuple[Session, LineageEdge]:
    """What :func:`session_fork` writes (the branch and its edge), checked and built but not
    saved: for a caller that inserts both in a statement of its own, in its transaction (a
    run start on PostgreSQL, ``runs_app.services.start_sql.insert_fork_and_lock``)."""
    return _derived(
        parent=session, op="fork", at=at, title=title, metadata=metadata, created_by=created_by
    )


def session_detach(
    *,
    session: Session,
    title: str | None = None,
    metadata: dict[str, Any] | None = None,
    created_by: str | None = None,
) -> Session:
    """A new lineage root with the same logical content. Storage is shared; the ``detach`` edge
    records where it came from, but the new session has no parents."""
    return _derive(
        parent=session, op="detach", at=None, title=title, metadata=metadata, created_by=created_by
    )


# --- Merge ---------------------------------------------------------------------------------------


@dataclass
class Branch:
    """One parent of a merge: its chunks after the common prefix."""

    session: Session
    length: int
    chunks: list[Chunk] = field(default_factory=list)


@dataclass(frozen=True)
class SummaryResult:
    """What a summarizer returns for a ``summary`` merge or a compression."""

    text: str
    usage: dict[str, Any] | None = None
    agent: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


Summarizer = Callable[[list[Branch]], SummaryResult]


def session_merge(
    *,
    sessions: Sequence[Session],
    strategy: str = "concat",
    title: str | None = None,
    summarizer: Summarizer | None = None,
    metadata: dict[str, Any] | None = None,
    created_by: str | None = None,
) -> Session:
    """A new session with several parents.

    ``concat``: the common prefix (shared storage, found from the base chains), then each
    branch's chunks after it, in parent order, tagged with ``branch`` = the parent's id.
    ``summary``: the common prefix, then one summary chunk written by ``summarizer``.
    ``append`` (OpenRath's ``a.merge(b)``): every chunk of the first session (shared storage:
    it is the base), then every chunk of each other one, a common prefix repeated.
    """
    if strategy not in LIBRARY_MERGE_STRATEGIES:
        raise ValidationFailed(
            f"strategy must be one of {', '.join(LIBRARY_MERGE_STRATEGIES)}",
            details={"strategy": [f"unknown strategy {strategy!r}"]},
        )
    if len(sessions) < 2:
        raise ValidationFailed(
            "a merge needs at least two sessions", details={"sessions": ["fewer than two"]}
        )
    if len({s.id for s in sessions}) != len(sessions):
        raise ValidationFailed("a session appears twice", details={"sessions": ["duplicate"]})
    first = sessions[0]
    if any(s.project_id != first.project_id for s in sessions):
        raise ValidationFailed(
            "merged sessions must belong to the same project",
            details={"sessions": ["different projects"]},
        )
    if strategy == "summary" and summarizer is None:
        raise ValidationFailed(
            "the summary strategy needs a summarizer (a flow.Compressor); none is configured",
            details={"strategy": ["no summarizer configured"]},
        )
    lengths = [_current_length(s) for s in sessions]
    if strategy == "append":
        prefix = lengths[0]
        branches = [Branch(session=first, length=prefix)] + [
            Branch(session=s, length=n, chunks=chunk_all(s.id, upto=n))
            for s, n in zip(sessions[1:], lengths[1:], strict=True)
        ]
    else:
        chains = [session_chain(s.id) for s in sessions]
        prefix = common_prefix_length(
            [segments_for(chain, length) for chain, length in zip(chains, lengths, strict=True)]
        )
        branches = [
            Branch(session=s, length=n, chunks=chunk_all(s.id, upto=n)[prefix:])
            for s, n in zip(sessions, lengths, strict=True)
        ]
    drafts: list[ChunkDraft]
    spent: dict[str, Any] | None = None
    if strategy in ("concat", "append"):
        drafts = [
            ChunkDraft(
                role=c.role,
                kind=c.kind,
                content=c.content,
                agent=c.agent,
                tool_call_id=c.tool_call_id,
                trust=c.trust,
                usage=c.usage,
                branch=str(branch.session.id),
                run_id=str(c.run_id) if c.run_id else None,
                step=c.step,
                workflow=c.workflow,
            )
            for branch in branches
            for c in branch.chunks
        ]
    else:
        assert summarizer is not None
        result = summarizer(branches)
        spent = result.usage
        drafts = [
            make_draft(
                role="assistant",
                kind="summary",
                content={"text": result.text, "branches": [str(s.id) for s in sessions]},
                agent=result.agent,
                usage=result.usage,
            )
        ]
    base_id, base_len = _base_for(first, prefix)
    ctx = context.current()
    # Copied chunks keep their original usage for provenance; the merge itself spends only
    # what a summarizer spent, so project totals count every token once.
    totals = usage_totals(drafts) if spent is not None else usage_totals([])
    with transaction.atomic():
        merged = Session.objects.create(
            tenant_id=first.tenant_id,
            project_id=first.project_id,
            title=(title if title is not None else f"merge of {len(sessions)} sessions")[:300],
            op="merge",
            base_id=base_id,
            base_len=base_len,
            own_len=len(drafts),
            placement=dict(first.placement),
            metadata={"strategy": strategy, "common_prefix": prefix, **(metadata or {})},
            created_by=created_by or ctx.actor,
            usage_prompt_tokens=totals["prompt_tokens"],
            usage_completion_tokens=totals["completion_tokens"],
            usage_total_tokens=totals["total_tokens"],
            usage_cost_usd=Decimal(str(totals["cost_usd"])),
            **_ctx_fields(),
        )
        LineageEdge.objects.bulk_create(
            [
                LineageEdge(
                    tenant_id=first.tenant_id,
                    parent=parent,
                    child=merged,
                    op="merge",
                    parent_len=length,
                    position=position,
                    **_ctx_fields(),
                )
                for position, (parent, length) in enumerate(zip(sessions, lengths, strict=True))
            ]
        )
        rows = Chunk.objects.bulk_create(_chunk_rows(merged, [_stamp(d) for d in drafts], base_len))
        _publish_after_commit(merged.id, rows)
    return merged


# --- Compress, place --------------------------------------------------------------------------


def session_compress(
    *,
    session: Session,
    result: SummaryResult,
    keep_system: Sequence[Chunk] = (),
    title: str | None = None,
    created_by: str | None = None,
) -> Session:
    """A new root holding a summary of ``session`` (lineage op ``compress``); its metadata keeps
    a reference to what it replaced and the token usage before and after."""
    length = _current_length(session)
    drafts = [
        ChunkDraft(role=c.role, kind=c.kind, content=c.content, agent=c.agent, trust=c.trust)
        for c in keep_system
    ]
    drafts.append(
        make_draft(
            role="user",
            kind="summary",
            content={"text": result.text},
            agent=result.agent,
            usage=result.usage,
        )
    )
    before = session.usage
    metadata = {
        "replaces": {"session": str(session.id), "length": length},
        "usage_before": before,
        "usage_of_compression": result.usage or {},
        **result.metadata,
    }
    ctx = context.current()
    totals = usage_totals(drafts)
    with transaction.atomic():
        compressed = Session.objects.create(
            tenant_id=session.tenant_id,
            project_id=session.project_id,
            title=(title if title is not None else f"summary of {session.title}".strip())[:300],
            op="compress",
            own_len=len(drafts),
            placement=dict(session.placement),
            metadata=metadata,
            created_by=created_by or ctx.actor,
            usage_prompt_tokens=totals["prompt_tokens"],
            usage_completion_tokens=totals["completion_tokens"],
            usage_total_tokens=totals["total_tokens"],
            usage_cost_usd=Decimal(str(totals["cost_usd"])),
            **_ctx_fields(),
        )
        LineageEdge.objects.create(
            tenant_id=session.tenant_id,
            parent=session,
            child=compressed,
            op="compress",
            parent_len=length,
            **_ctx_fields(),
        )
        rows = Chunk.objects.bulk_create(_chunk_rows(compressed, [_stamp(d) for d in drafts], 0))
        _publish_after_commit(compressed.id, rows)
    return compressed


#: Backends whose spec is a workspace directory on this machine.
WORKSPACE_BACKENDS = ("local", "bwrap")


def project_workspace_root(*, tenant_id: Any, project_id: Any) -> Path:
    """Where a project's workspaces live: ``$OPENRATH_DATA_DIR/workspaces/<tenant>/<project>``."""
    return Path(settings.DATA_DIR) / "workspaces" / str(tenant_id) / str(project_id)


def _workspace_spec(session: Session, spec: Any) -> str:
    """An absolute workspace path: no spec is the session's own workspace, a relative one lives
    under the project's root (so two tenants' ``"notes"`` are two directories); an absolute path
    is the deploying code's explicit choice and is kept."""
    root = project_workspace_root(tenant_id=session.tenant_id, project_id=session.project_id)
    if spec is None or spec == "":
        return str(root / str(session.id))
    if not isinstance(spec, str) or "\x00" in spec:
        raise ValidationFailed("spec must be a path string", details={"spec": ["not a path"]})
    path = Path(spec)
    if path.is_absolute():
        return spec
    if ".." in path.parts:
        raise ValidationFailed(
            f"workspace spec {spec!r} must not contain '..'", details={"spec": ["contains '..'"]}
        )
    return str(root / path)


def session_place(
    *, session: Session, backend: str, spec: Any = None, policy: Any = None
) -> Session:
    """Bind the session to a sandbox backend (``"local"`` with a workspace path) and policy.

    Only code the operator deployed calls this (workflows, agents, scripts: ``session.to()``);
    no API accepts a placement, and imports drop theirs. ``policy`` is a ``ToolPolicy`` (or its
    JSON form), stored with the placement.
    """
    # Imported here: the sandbox imports the tool package, which imports the providers.
    from sessions_app.sandbox import policy_from_placement, registered_backends
    from sessions_app.tools.policy import ToolPolicy

    if not isinstance(backend, str) or not backend:
        raise ValidationFailed("backend must be a non-empty string", details={"backend": ["empty"]})
    if backend not in registered_backends():
        raise ValidationFailed(
            f"unknown sandbox backend {backend!r}; known backends: "
            f"{', '.join(registered_backends())}",
            details={"backend": ["unknown"]},
        )
    if backend in WORKSPACE_BACKENDS:
        spec = _workspace_spec(session, spec)
    placement: dict[str, Any] = {"backend": backend, "spec": spec}
    if policy is not None:
        if not isinstance(policy, ToolPolicy):
            try:
                policy = policy_from_placement(policy)
            except (TypeError, ValueError) as exc:
                raise ValidationFailed(str(exc), details={"policy": [str(exc)]}) from None
        placement["policy"] = policy.as_json()
    Session.objects.filter(id=session.id).update(placement=placement, updated_at=timezone.now())
    session.placement = placement
    return session
