"""Forks: a new run that starts from checkpoint ``k`` of another run (time travel).

:func:`run_fork` writes a constant number of rows whatever the parent's history holds: the run,
one checkpoint (the branch point, stored whole, numbered ``k`` so the fork's first new
checkpoint is ``k + 1``), one session and its lineage edge (a copy-on-write fork of the working
session at the length checkpoint ``k`` references: no chunk is copied), the run-to-run
:class:`~runs_app.models.RunFork` edge and two events. The parent is only read: forking a run
that is still executing changes nothing in it (no event either; its forks are listed by
``GET /api/v1/runs/{id}/forks/`` and the ``RunFork`` table).

What ``k`` means:

* ``0`` is the run's start: its input, its entry node (a branch run's first node), and its
  working session as the run was created (before any step appended to it);
* ``1 .. checkpoint_seq`` are the checkpoints its steps committed: the state after the step, the
  checkpoint's next nodes and ``(session, length)``;
* a fork's checkpoints before its own branch point are its parent's (they are the same
  history), so forking a fork there reads them from the parent, any number of generations up.

Refused (409): a checkpoint with no next node (the run ended there), a checkpoint that started a
fan-out (its branches ran after it: fork before the router or after the join), an opaque-plan or
replay run, and with ``plan="current"`` next nodes the workflow's current plan no longer has.
A pinned fork of a workflow whose code changed since stops in ``needs_review`` (plan drift) when
a worker claims it, as any run does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from openrath_project import large_values
from openrath_project.errors import Conflict, ValidationFailed
from openrath_project.ids import uuid7
from openrath_project.jsontext import digest
from runs_app import dispatch, registration, tracing
from runs_app.models import Checkpoint, Run, RunEvent, RunFork, WorkflowPlan
from runs_app.registry import WorkflowRegistry
from runs_app.services.checkpoints import run_state_at
from runs_app.services.eventlog import publish_event
from runs_app.services.runs import _check_queue_cap, plan_store
from runs_app.state_delta import check_json_change, check_json_state
from sessions_app import context as session_context
from sessions_app import services as session_services
from sessions_app.models import Chunk, Session

PLAN_MODES = ("pinned", "current")

__all__ = ["PLAN_MODES", "ForkPoint", "fork_point", "merge_patch", "run_fork"]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: ``patch``'s members replace ``target``'s, ``null`` removes a
    member, objects merge recursively, anything else (lists included) replaces. Pure."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass(frozen=True)
class ForkPoint:
    """What a fork at checkpoint ``seq`` of a run starts from."""

    seq: int
    state: dict[str, Any]
    next_nodes: list[str]
    session_id: uuid.UUID
    session_len: int
    #: The step that committed the checkpoint (``""`` for the start).
    step: str
    attempt: int


def _start_session(run: Run) -> tuple[uuid.UUID, int]:
    """The run's working session as it was created, and its length then: the first session
    made for the run, up to the first chunk a step wrote to it (chunks written at creation,
    like the user message, carry no step)."""
    first = Session.objects.filter(run_id=run.id).order_by("id").first()
    if first is None:  # a run created before sessions recorded their run
        if run.session_id is None:
            raise Conflict("the run has no working session", details={"run": str(run.id)})
        first = Session.objects.get(id=run.session_id)
    by_step = (
        Chunk.objects.filter(session_id=first.id)
        .exclude(step="")
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    return first.id, int(by_step) if by_step is not None else first.length


def _key_share(run_id: uuid.UUID) -> None:
    """Take now the lock the fork edge's foreign key takes on the run (PostgreSQL)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {Run._meta.db_table} WHERE id = %s FOR KEY SHARE", [run_id])  # noqa: S608


def fork_point(run: Run, seq: int) -> ForkPoint:
    """Checkpoint ``seq`` of ``run`` as a fork sees it (see the module docstring). 400 when
    ``seq`` is not one of the run's checkpoints; 409 when nothing could run from it."""
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= run.checkpoint_seq:
        raise ValidationFailed(
            f"checkpoint must be between 0 and the run's last checkpoint ({run.checkpoint_seq})",
            details={"checkpoint": [f"out of range 0..{run.checkpoint_seq}"]},
        )
    edge = RunFork.objects.filter(child_id=run.id).select_related("parent").first()
    if edge is not None and seq < edge.checkpoint_seq:
        return fork_point(edge.parent, seq)  # before the branch point: the parent's history
    if seq == 0:
        session_id, length = _start_session(run)
        entry = run.branch or str(run.plan.definition.get("entry", ""))
        return ForkPoint(0, dict(run.input), [entry], session_id, length, "", 1)
    checkpoint = Checkpoint.objects.get(run=run, seq=seq)
    if checkpoint.session_id is None:
        raise Conflict("the checkpoint has no session", details={"checkpoint": seq})
    next_nodes = [str(node) for node in checkpoint.next_nodes or []]
    if not next_nodes:
        raise Conflict(
            f"checkpoint {seq} ended the run: nothing runs after it",
            code="nothing_to_run",
            details={"checkpoint": seq},
        )
    if RunEvent.objects.filter(
        run=run, type="router.decided", data__checkpoint=seq, data__fanout=True
    ).exists():
        raise Conflict(
            f"checkpoint {seq} started a fan-out whose branches ran after it: fork at "
            f"checkpoint {seq - 1} (before the router) or after the join",
            code="fork_inside_fanout",
            details={"checkpoint": seq, "join": next_nodes},
        )
    return ForkPoint(
        seq,
        run_state_at(run, seq),
        next_nodes,
        checkpoint.session_id,
        checkpoint.session_len,
        checkpoint.step,
        checkpoint.attempt,
    )


def _fork_plan(
    run: Run, plan: str, point: ForkPoint, registry: WorkflowRegistry | None
) -> WorkflowPlan:
    """The plan the fork pins: the parent's, or what the workflow compiles to now, which must
    still have every node the fork starts at (409 ``plan_mismatch`` otherwise)."""
    if plan == "pinned":
        return run.plan
    entry = (registry or registration.workflows()).get(run.workflow)
    known = {node.id for node in entry.plan.nodes}
    missing = [node for node in point.next_nodes if node not in known]
    if missing:
        raise Conflict(
            f"the workflow's current plan has no node {', '.join(missing)}: checkpoint "
            f"{point.seq} cannot continue under it (fork with plan='pinned')",
            code="plan_mismatch",
            details={"missing": missing, "pinned": run.plan_id, "current": entry.plan.hash},
        )
    return plan_store(entry.plan)


def _patched(run: Run, state: dict[str, Any], patch: dict[str, Any] | None) -> dict[str, Any]:
    """The checkpoint's state with the merge patch applied, checked where it changed like a
    step's new state, with large values stored as artifacts."""
    if patch is None:
        return state
    checked = check_json_state(patch, where="state_patch")
    merged = merge_patch(state, checked)
    check_json_change(state, merged, where="the patched state")
    return large_values.offload(run.tenant_id, merged, before=state, changed=list(checked))


def run_fork(
    *,
    run: Run,
    checkpoint_seq: int,
    state_patch: dict[str, Any] | None = None,
    plan: str = "pinned",
    title: str = "",
    reason: str = "",
    actor: str = "",
    registry: WorkflowRegistry | None = None,
) -> Run:
    """Queue a new run that continues ``run`` from checkpoint ``checkpoint_seq`` (module
    docstring), with ``state_patch`` (an RFC 7386 merge patch) on the checkpoint's state.

    ``plan``: ``pinned`` (the parent's plan) or ``current`` (what the workflow compiles to now,
    in ``registry``, by default the process's). The caller has checked the principal's scope and
    grant and audits the request. Reads the parent without locking it; writes the rows listed in
    the module docstring in one short transaction and dispatches the fork after commit.
    """
    if plan not in PLAN_MODES:
        raise ValidationFailed(
            "plan must be 'pinned' or 'current'", details={"plan": ["pinned or current"]}
        )
    if state_patch is not None and not isinstance(state_patch, dict):
        raise ValidationFailed(
            "state_patch must be a JSON object (an RFC 7386 merge patch)",
            details={"state_patch": ["must be a JSON object"]},
        )
    if run.kind != "run" or not run.workflow:
        raise Conflict(
            "only runs of a registered workflow can be forked",
            code="not_forkable",
            details={"kind": run.kind, "workflow": run.workflow},
        )
    point = fork_point(run, checkpoint_seq)
    plan_row = _fork_plan(run, plan, point, registry)
    state = _patched(run, point.state, state_patch)
    child_id = uuid7()
    parent_session = Session.objects.get(id=point.session_id)
    trace_context = tracing.run_root(
        run_id=child_id,
        workflow=run.workflow,
        tenant_id=run.tenant_id,
        project_id=run.project_id,
        origin_carrier=run.trace_context or None,
    )
    with transaction.atomic():
        # The lock order of every start: the rows it references first, the tenant's queue lock
        # last. The edge's foreign key share-locks the run; a submission that superseded it
        # holds its row lock and then asks for the queue lock, so taking the queue lock first
        # here could deadlock with it.
        _key_share(run.id)
        _check_queue_cap(run.tenant_id)  # inside the insert's transaction, as run_create's
        with session_context.writing(actor=actor or "api", run_id=child_id):
            working = session_services.session_fork(
                session=parent_session,
                at=point.session_len,
                title=(title or f"fork of {run.workflow} at checkpoint {point.seq}")[:300],
                metadata={
                    "run": str(child_id),
                    "forked_from": {"run": str(run.id), "checkpoint": point.seq},
                },
                created_by=actor,
            )
        child = Run.objects.create(
            id=child_id,
            tenant_id=run.tenant_id,
            project_id=run.project_id,
            workflow=run.workflow,
            plan=plan_row,
            status="queued",
            input=state if point.seq == 0 else run.input,
            state=state,
            state_seq=point.seq,
            checkpoint_seq=point.seq,
            session=working,
            session_len=point.session_len,
            branch=run.branch,
            join_step=run.join_step,
            priority=run.priority,
            next_nodes=point.next_nodes,
            created_by=actor,
            token_budget=run.token_budget,
            cost_budget_usd=run.cost_budget_usd,
            event_seq=2,
            trace_context=trace_context,
        )
        Checkpoint.objects.create(
            run=child,
            seq=point.seq,
            step=point.step,
            next_nodes=point.next_nodes,
            full=True,
            state=state,
            state_digest=digest(state),
            session_id=working.id,
            session_len=point.session_len,
            fencing_token=0,
            attempt=point.attempt,
        )
        edge = RunFork.objects.create(
            tenant_id=run.tenant_id,
            project_id=run.project_id,
            parent=run,
            child=child,
            checkpoint_seq=point.seq,
            plan_mode=plan,
            state_patch=state_patch,
            created_by=actor[:200],
            reason=reason[:500],
        )
        forked = {"run": str(run.id), "checkpoint": point.seq, "by": actor, "reason": reason}
        RunEvent.objects.bulk_create(
            [
                RunEvent(
                    run=child,
                    seq=1,
                    type="run.created",
                    data={
                        "workflow": run.workflow,
                        "plan": plan_row.hash,
                        "session": str(working.id),
                        "forked_from": forked,
                    },
                ),
                RunEvent(
                    run=child,
                    seq=2,
                    type="run.forked",
                    data={
                        **forked,
                        "fork": edge.id,
                        "plan_mode": plan,
                        "patched": state_patch is not None,
                        "next": point.next_nodes,
                    },
                ),
            ]
        )
        publish_event(child.id, 1)
        publish_event(child.id, 2)
        dispatch.on_commit(child.id)
    return child
