"""Branches: a router's fan-out into child runs, its end, and a branch's completion.

A fan-out commits the router's checkpoint, then creates one child run per branch (each on a
fork of the working session) and moves the parent to ``waiting`` in one transaction; the last
branch to end wakes the parent (:func:`runs_app.services.runs.branch_finished`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from openrath_project import tracing
from openrath_project.errors import Conflict
from openrath_project.ids import uuid7
from runs_app import dispatch
from runs_app.models import Run, RunEvent
from runs_app.services.checkpoints import StepCommit, checkpoint_commit
from runs_app.services.leases import Claim, StaleLease
from runs_app.services.runs import RunChanges, run_transition
from sessions_app import context as session_context
from sessions_app import services as session_services
from sessions_app.chunk_rules import ChunkDraft


def fanout_start(
    *,
    claim: Claim,
    run: Run,
    router: str,
    branches: Sequence[str],
    join: str,
    state: dict[str, Any],
    checkpoint_seq: int,
    previous_state: dict[str, Any],
    attempt: int,
    chunks: list[ChunkDraft] | None = None,
) -> list[Run]:
    """Run the branches in parallel: one child run per branch, each on a fork of the working
    session; the parent waits (lease released) until they all end."""
    seq = checkpoint_commit(
        claim=claim,
        commit=StepCommit(
            step=router,
            state=state,
            previous_state=previous_state,
            next_nodes=[join],
            attempt=attempt,
            event="router.decided",
            event_data={"choice": list(branches), "fanout": True},
            chunks=chunks or [],
        ),
        checkpoint_seq=checkpoint_seq,
    )
    children: list[Run] = []
    with transaction.atomic():
        parent = Run.objects.select_for_update().get(id=run.id)
        if parent.fencing_token != claim.token or parent.status != "running":
            raise StaleLease("the run's lease is no longer this worker's")
        if parent.session is None:
            raise Conflict("the run has no working session to branch from")
        for name in branches:
            child_id = uuid7()
            with session_context.writing(actor=f"run:{run.id}", run_id=child_id, step=name):
                branch_session = session_services.session_fork(
                    session=parent.session,
                    title=f"branch {name}",
                    metadata={"run": str(child_id), "branch": name},
                )
            child = Run.objects.create(
                id=child_id,
                tenant_id=parent.tenant_id,
                project_id=parent.project_id,
                workflow=parent.workflow,
                plan_id=parent.plan_id,
                status="queued",
                input=state,
                state=state,
                session=branch_session,
                session_len=branch_session.length,
                parent=parent,
                branch=name,
                join_step=join,
                priority=parent.priority,
                deadline=parent.deadline,
                next_nodes=[name],
                created_by=f"run:{run.id}",
                event_seq=1,
                # The router step's span: the branches are its concurrent children.
                trace_context=tracing.carrier_of(),
            )
            RunEvent.objects.create(
                run=child,
                seq=1,
                type="run.created",
                data={"parent": str(parent.id), "branch": name},
            )
            dispatch.on_commit(child.id)
            children.append(child)
        child_ids = [str(c.id) for c in children]
        # In the same transaction as the children: no branch exists without its waiting parent.
        run_transition(
            run_id=parent.id,
            to="waiting",
            event="branches.started",
            step=router,
            token=claim.token,
            data={"branches": list(branches), "join": join, "children": child_ids},
            changes=RunChanges(
                state=state,
                state_seq=seq,
                fanout={
                    "router": router,
                    "join": join,
                    "branches": list(branches),
                    "children": child_ids,
                },
            ),
        )
    return children


def fanout_clear(*, claim: Claim) -> None:
    """The join step committed: the fan-out is over."""
    Run.objects.filter(id=claim.run_id, fencing_token=claim.token, status="running").update(
        fanout=None
    )


def branch_complete(*, claim: Claim, state: dict[str, Any], checkpoint_seq: int) -> Run:
    """A branch reached its join step: it ends here, its state is its result."""
    return run_transition(
        run_id=claim.run_id,
        to="succeeded",
        event="run.succeeded",
        token=claim.token,
        data={"checkpoint": checkpoint_seq, "branch_done": True},
        changes=RunChanges(output=state, state=state, state_seq=checkpoint_seq, next_nodes=[]),
    )
