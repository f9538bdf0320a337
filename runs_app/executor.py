"""Executing a claimed run: its steps one after the other, each committed as a checkpoint.

The executor runs in the thread that claimed the run. A watchdog thread renews the lease and
enforces, preemptively, the step's timeout, the run's deadline and cancellation: it raises an
exception *inside* the step's thread (so it stops synchronous Python code too) and, when the
step does not stop within ``OPENRATH_HARD_TIMEOUT_GRACE`` seconds, takes the hard backstop:
a worker process exits (its lease then expires and another worker takes the run over); an
in-process (embedded) worker abandons the thread, whose commits are fenced out.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import inspect
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import Q
from django.utils import timezone

from effects_app.services import LedgerDecisions, effect_call
from openrath_project.context import RunContext
from openrath_project.errors import DomainError
from openrath_project.jsonlog import log_context
from openrath_project.metrics import observe_step
from openrath_project.security import Principal, SecurityContext
from runs_app import services
from runs_app.budgets import budget_check
from runs_app.control import (
    DeadlineExceeded,
    LeaseLost,
    NeedsReview,
    StepInterrupted,
    StepSuspended,
    StepTimeout,
)
from runs_app.interrupts import interrupt_request
from runs_app.models import Run
from runs_app.plan import (
    Plan,
    PlanNode,
    RouteError,
    StateSchemaError,
    bind_handlers,
    call_handler,
    check_state,
)
from runs_app.registry import RegisteredWorkflow, UnknownWorkflow, WorkflowRegistry
from runs_app.state_track import StateTrack
from runs_app.step import StepRef
from runs_app.tracing import StepSpans, step_failed
from sessions_app import context as session_context
from sessions_app import services as session_services
from sessions_app.models import Session
from sessions_app.value import Session as FlowSession

logger = logging.getLogger(__name__)
#: How often a running run's watchdog asks whether an interrupt was requested (seconds).
STOP_POLL_SECONDS = 1.0


def _raise_in_thread(thread_id: int, exc_type: type[BaseException]) -> None:
    """Raise ``exc_type`` asynchronously in the thread, at its next bytecode boundary.

    Only ever called to stop a step, never to clear: on CPython 3.11 clearing
    (``PyThreadState_SetAsyncExc(tid, NULL)``) leaves the interpreter's "async exception"
    eval-breaker flag set for good, and every later ``sys.settrace`` / ``sys.setprofile`` user
    (pdb, cProfile, trace-based coverage) then spins. A stop raised too late to matter is
    absorbed instead (:meth:`Watchdog.end_step`), which clears the flag the normal way.
    """
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type)
    )


def _tracked(exc_type: type[StepInterrupted], delivered: Callable[[], None]) -> type:
    """A subclass of ``exc_type`` (same name) that reports when it is raised in the thread.

    The interpreter instantiates an asynchronous exception before any Python code of the
    thread can see it, so "instantiated" means "delivered, no longer pending".
    """

    def __init__(self: BaseException, *args: Any) -> None:
        delivered()
        exc_type.__init__(self, *args)

    return type(
        exc_type.__name__,
        (exc_type,),
        {
            "__init__": __init__,
            "__module__": exc_type.__module__,
            "__qualname__": exc_type.__qualname__,
        },
    )


class Watchdog(threading.Thread):
    """Renews the lease and stops a step that must stop (timeout, deadline, lost lease)."""

    def __init__(
        self,
        claim: services.Claim,
        *,
        deadline: datetime | None,
        target_thread: int,
        process_mode: bool,
    ) -> None:
        super().__init__(name=f"watchdog-{claim.run_id}", daemon=True)
        self.claim = claim
        self.deadline = deadline
        self.target = target_thread
        self.process_mode = process_mode
        self.heartbeat_every = max(0.5, settings.OPENRATH_LEASE_SECONDS / 3)
        self.grace = float(settings.OPENRATH_HARD_TIMEOUT_GRACE)
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._in_step = False
        self._step_deadline: float | None = None
        self._raised_at: float | None = None
        self._delivered = False
        self.raised: type[StepInterrupted] | None = None
        #: The run was asked to stop (an ``interrupt`` submission on its session): it ends at
        #: its next step boundary. Polled every STOP_POLL_SECONDS, off the step's thread.
        self.stop_requested = False
        #: A run waits for this one to end (seen by the same poll): the step commit that ends
        #: it then releases that run in the same transaction.
        self.followed = False
        self.lost = False
        self.abandoned = False
        self.step_started = 0.0

    def begin_step(self, timeout_seconds: float | None) -> None:
        with self._lock:
            self._in_step = True
            self._raised_at = None
            self._delivered = False
            self.raised = None
            self.step_started = time.monotonic()
            self._step_deadline = self.step_started + timeout_seconds if timeout_seconds else None

    def end_step(self) -> None:
        """The step is over: nothing more is raised into its thread, and a stop raised too late
        to matter (still pending) is absorbed here. Idempotent; called from the step's thread.
        The stop may also surface from this call itself (the caller treats it as the step's)."""
        with self._lock:
            self._in_step = False
            self._step_deadline = None
            pending = self._raised_at is not None and not self._delivered
        if pending:
            self._absorb()

    def _mark_delivered(self) -> None:
        self._delivered = True

    def _absorb(self) -> None:
        """Let the pending stop fire here, where it is dropped (it fires at the first check of
        the eval breaker, already signalled: a loop's backward jump)."""
        give_up = time.monotonic() + 5
        while not self._delivered and time.monotonic() < give_up:
            try:
                while not self._delivered and time.monotonic() < give_up:
                    pass
            except StepInterrupted:
                pass
        if not self._delivered:  # pragma: no cover - the interpreter never delivered it
            logger.error("run %s: a pending stop was not delivered", self.claim.run_id)

    def stop(self) -> None:
        self._stop_event.set()

    def _interrupt(self, exc_type: type[StepInterrupted]) -> None:
        with self._lock:
            if not self._in_step or self._raised_at is not None:
                return
            self.raised = exc_type
            self._raised_at = time.monotonic()
            _raise_in_thread(self.target, _tracked(exc_type, self._mark_delivered))
        logger.warning("interrupting run %s: %s", self.claim.run_id, exc_type.__name__)

    def _poll_stop_request(self) -> None:
        """One query: was the run asked to stop, and does a run wait for it to end?"""
        run_id = self.claim.run_id
        try:
            ids = set(
                Run.objects.filter(
                    Q(pk=run_id, stop_requested_at__isnull=False)
                    | Q(after_run_id=run_id, status="queued")
                ).values_list("id", flat=True)[:2]
            )
        except Exception:  # the database is away: the next poll asks again
            logger.exception("stop-request poll failed for run %s", run_id)
            return
        if run_id in ids:
            self.stop_requested = True
        if ids - {run_id}:
            self.followed = True

    def run(self) -> None:
        next_beat = time.monotonic() + self.heartbeat_every
        next_stop_poll = time.monotonic() + STOP_POLL_SECONDS
        try:
            while not self._stop_event.wait(0.2):
                now = time.monotonic()
                if now >= next_stop_poll and not (self.stop_requested and self.followed):
                    next_stop_poll = now + STOP_POLL_SECONDS
                    self._poll_stop_request()
                if now >= next_beat and not self.lost:
                    next_beat = now + self.heartbeat_every
                    try:
                        alive = services.lease_heartbeat(claim=self.claim)
                    except Exception:  # the database is away: keep trying, the lease may hold
                        logger.exception("heartbeat failed for run %s", self.claim.run_id)
                        alive = True
                    if not alive:
                        self.lost = True
                        self._interrupt(LeaseLost)
                if self.deadline is not None and timezone.now() >= self.deadline:
                    self._interrupt(DeadlineExceeded)
                with self._lock:
                    step_deadline, raised_at = self._step_deadline, self._raised_at
                if step_deadline is not None and now >= step_deadline:
                    self._interrupt(StepTimeout)
                if raised_at is not None and now - raised_at > self.grace:
                    self._hard_stop()
                    return
        finally:
            connection.close()

    def _hard_stop(self) -> None:
        """The step ignored the soft stop: the hard backstop."""
        if self.process_mode:
            logger.critical(
                "run %s: step did not stop %.0fs after %s; exiting the worker "
                "process (the lease will expire)",
                self.claim.run_id,
                self.grace,
                self.raised.__name__ if self.raised else "?",
            )
            logging.shutdown()
            os._exit(70)
        logger.critical(
            "run %s: step did not stop; abandoning its thread (its commits are "
            "fenced out once the lease expires)",
            self.claim.run_id,
        )
        self.abandoned = True


# --- The step context ----------------------------------------------------------------------


@dataclass
class StepContext:
    """What a handler gets as ``ctx``: ``session``, ``run_id``, ``attempt``, ``project``,
    ``interrupt(...)`` and ``effect(...)``."""

    run_id: uuid.UUID
    step: str
    attempt: int
    project: Any
    session: FlowSession
    worker: str
    fencing_token: int
    deadline: datetime | None
    tenant_id: uuid.UUID
    #: The run's checkpoint when the step started (identifies this pass through the step).
    checkpoint_seq: int = 0
    _interrupt_calls: int = field(default=0, repr=False)
    _watchdog: Watchdog | None = field(default=None, repr=False)

    @property
    def stop_requested(self) -> bool:
        """Whether the run was asked to stop (an ``interrupt`` submission on its session): it
        ends at the next step boundary, so a long step may return early when this is true."""
        return self._watchdog is not None and self._watchdog.stop_requested

    @property
    def ref(self) -> StepRef:
        """This pass through the step, as the ledgers that act for it (interrupts, effects,
        decisions, budgets) see it."""
        return StepRef(
            run_id=self.run_id,
            step=self.step,
            checkpoint_seq=self.checkpoint_seq,
            fencing_token=self.fencing_token,
            tenant_id=self.tenant_id,
            project_id=self.project.id,
            session_id=self.session.id,
        )

    @property
    def logger(self) -> logging.Logger:
        return logging.getLogger(f"openrath.run.{self.step}")

    def interrupt(
        self,
        kind: Any,
        request: Any,
        timeout_seconds: float | None = None,
        schema: dict[str, Any] | None = None,
        *,
        title: str = "",
        default: dict[str, Any] | None = None,
        raise_on_reject: bool = True,
    ) -> Any:
        """Pause the run for a person's decision and return it (``Decision``).

        The run waits with its lease released; when someone resolves the interrupt the run is
        requeued and this step runs again from its start, and this call then returns the
        decision (a rejection raises ``flow.InterruptRejected`` unless ``raise_on_reject`` is
        false). See docs/authoring.md.
        """
        self._interrupt_calls += 1
        return interrupt_request(
            self.ref,
            kind=kind,
            request=request,
            timeout_seconds=timeout_seconds,
            schema=schema,
            title=title,
            default=default,
            sequence=self._interrupt_calls,
            raise_on_reject=raise_on_reject,
        )

    @property
    def request(self) -> Any:
        """OpenRath's ``context.request``: the run's ``RunContext`` (security, deadline,
        project), rebuilt from the stored run, so it is the same in any worker process."""
        run = (
            Run.objects.select_related("tenant")
            .only("tenant__slug", "created_by")
            .get(id=self.run_id)
        )
        return RunContext(
            security=SecurityContext(
                principal=Principal.from_actor(run.created_by), tenant_id=run.tenant.slug
            ),
            deadline=self.deadline,
            project=getattr(self.project, "slug", "default"),
        )

    def effect(
        self, key: str, fn: Callable[..., Any], *args: Any, idempotent: bool = False, **kwargs: Any
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` through the effect ledger, at most once per key: a
        recorded result is returned without calling ``fn`` again."""
        return effect_call(
            self.ref, key=key, fn=fn, args=args, kwargs=kwargs, idempotent=idempotent
        )


# --- Executing one claimed run -------------------------------------------------------------


@dataclass
class Outcome:
    status: str
    steps: int = 0


def _error(exc: BaseException, node: str, attempt: int) -> dict[str, Any]:
    message = str(exc) if str(exc) else type(exc).__name__
    return {"type": type(exc).__name__, "message": message[:2000], "step": node, "attempt": attempt}


def _prepare_session(run: Run, claim: services.Claim) -> Session:
    """The run's view of its working session at its last checkpoint, owned by this lease.

    Claiming the writer first shuts out a stale worker; then, if a crashed attempt appended
    past the checkpoint, the run continues on a fork at the checkpoint's length (the abandoned
    chunks stay visible in lineage, never in the run's view).
    """
    assert run.session_id is not None, "every run is created with a working session"
    session = claim.session or Session.objects.get(pk=run.session_id)  # the claim read it
    if claim.session_length is None:  # the claim did not take the writer (not PostgreSQL)
        session_services.session_claim_writer(session=session, run_id=run.id, token=claim.token)
        session.refresh_from_db(fields=["base_len", "own_len"])
    if session.length == run.session_len:
        return session
    with session_context.writing(
        actor=f"run:{run.id}", run_id=run.id, step=(run.next_nodes or [""])[0]
    ):
        fork = session_services.session_fork(
            session=session,
            at=run.session_len,
            title=session.title,
            metadata={
                "run": str(run.id),
                "reason": "retry after an interrupted attempt",
                "abandoned": {"session": str(session.id), "length": session.length},
            },
        )
    session_services.session_claim_writer(session=fork, run_id=run.id, token=claim.token)
    services.run_repoint_session(claim=claim, session=fork, abandoned=session)
    return fork


def _join_inputs(
    run: Run, state: dict[str, Any], claim: services.Claim
) -> tuple[dict[str, Any], Session | None]:
    """The join step's state (``state["branches"]``) and the merged branch sessions."""
    fanout = run.fanout or {}
    children = {str(c.id): c for c in Run.objects.filter(id__in=fanout.get("children", []))}
    ordered = [children[cid] for cid in fanout.get("children", []) if cid in children]
    branches = [
        {
            "branch": child.branch,
            "run": str(child.id),
            "state": child.output,
            "session": str(child.session_id) if child.session_id else None,
        }
        for child in ordered
    ]
    joined = {**state, "branches": branches}
    sessions = [
        Session.objects.get(id=child.session_id)
        for child in ordered
        if child.session_id is not None
    ]
    merged = None
    if len(sessions) >= 2:
        with session_context.writing(
            actor=f"run:{run.id}", run_id=run.id, step=fanout.get("join", "")
        ):
            merged = session_services.session_merge(
                sessions=sessions,
                strategy="concat",
                title=f"join of {run.workflow}",
                metadata={"run": str(run.id), "join": fanout.get("join")},
            )
        session_services.session_claim_writer(session=merged, run_id=run.id, token=claim.token)
        services.run_repoint_session(claim=claim, session=merged, abandoned=None)
    return joined, merged


def _call(node: PlanNode, handler: Callable[..., Any], state: Any, ctx: StepContext) -> Any:
    result = call_handler(node, handler, state, ctx)
    if inspect.isawaitable(result):

        async def bounded() -> Any:
            if node.timeout_seconds:
                return await asyncio.wait_for(result, timeout=node.timeout_seconds)
            return await result

        return asyncio.run(bounded())
    return result


def execute_claim(
    claim: services.Claim,
    *,
    registry: WorkflowRegistry,
    process_mode: bool = False,
    max_steps: int | None = None,
) -> Outcome:
    """Run the claimed run's steps until it ends, waits, retries later or loses its lease
    (or, with ``max_steps``, stops at the first checkpoint after that many steps, the run still
    ``running`` under this lease: ``LocalRuntime.work_once(max_steps=)``)."""
    run = claim.run or Run.objects.select_related("project").get(id=claim.run_id)
    with log_context(run=run.id, tenant=run.tenant_id, worker=claim.worker):
        try:
            registered = registry.get(run.workflow)
        except UnknownWorkflow:
            services.run_needs_review(
                run_id=run.id,
                token=claim.token,
                reason="workflow not registered",
                data={"workflow": run.workflow},
            )
            return Outcome("needs_review")
        if registered.plan.hash != run.plan_id:
            services.run_needs_review(
                run_id=run.id,
                token=claim.token,
                reason="plan drift",
                data={"pinned": run.plan_id, "current": registered.plan.hash},
            )
            return Outcome("needs_review")
        watchdog = Watchdog(
            claim,
            deadline=run.deadline,
            target_thread=threading.get_ident(),
            process_mode=process_mode,
        )
        watchdog.start()
        try:
            with StepSpans(run, worker=claim.worker) as spans:
                outcome = _execute(run, claim, registered, watchdog, spans, max_steps=max_steps)
                spans.finish(outcome.status)
                return outcome
        except services.StaleLease:
            return Outcome("lost")
        finally:
            watchdog.stop()
            if not watchdog.abandoned:
                watchdog.join(timeout=5)


def _has_budgets(run: Run, session: Session) -> bool:
    return (
        run.token_budget is not None
        or run.cost_budget_usd is not None
        or isinstance((session.metadata or {}).get("budget"), dict)
    )


def _flush_held(buffer: session_context.StepBuffer, claim: services.Claim) -> None:
    """An attempt ends without committing: what it held is written to the working session, so
    the abandoned attempt stays visible in lineage (the next attempt continues on a fork)."""
    held = buffer.take()
    if not held:
        return
    try:
        session_services.append_now(
            Session(id=buffer.session_id, tenant_id=buffer.tenant_id),
            held,
            session_context.Fence(claim.run_id, claim.token),
        )
    except (session_services.StaleFence, session_services.SessionBusy):
        logger.info("run %s: the abandoned attempt's chunks could not be kept", claim.run_id)


def _execute(
    run: Run,
    claim: services.Claim,
    registered: RegisteredWorkflow,
    watchdog: Watchdog,
    spans: StepSpans,
    *,
    max_steps: int | None = None,
) -> Outcome:
    plan: Plan = registered.plan
    state = services.run_state_at(run)
    try:
        workflow = registered.build()
    except Exception as exc:  # the workflow cannot be constructed: that is the run's error
        node = run.next_nodes[0] if run.next_nodes else plan.entry
        services.run_fail(
            claim=claim,
            step=node,
            state=state,
            error=_error(exc, node, run.attempt) | {"while": "constructing the workflow"},
        )
        return Outcome("failed")
    handlers = bind_handlers(plan, workflow)
    checkpoint_seq = run.checkpoint_seq
    keyframes = services.Keyframes()  # this claim's: its first checkpoint stores the state whole
    session = _prepare_session(run, claim)
    node_id = run.next_nodes[0] if run.next_nodes else plan.entry
    attempt = run.attempt
    steps = 0
    joining = bool(run.fanout) and node_id == (run.fanout or {}).get("join")
    if joining:
        joined, merged = _join_inputs(run, state, claim)
        track = StateTrack(run.tenant_id, joined, committed=state)
        state = joined
        session = merged or session
    else:
        track = StateTrack(run.tenant_id, state)
    buffer = session_context.StepBuffer(session.id, run.tenant_id, session.length)
    budgets = _has_budgets(run, session)
    fence = session_context.Fence(run.id, claim.token)
    flow_session = FlowSession(session)
    if run.stop_requested_at is not None:  # asked to stop before this claim: stop here
        services.run_interrupted(claim=claim, step=node_id, state=state, checkpoint=checkpoint_seq)
        return Outcome("cancelled", steps)
    while True:
        if run.join_step and node_id == run.join_step:
            services.branch_complete(claim=claim, state=state, checkpoint_seq=checkpoint_seq)
            return Outcome("succeeded", steps)
        node = plan.node(node_id)
        if run.deadline is not None and timezone.now() >= run.deadline:
            _flush_held(buffer, claim)
            services.run_fail(
                claim=claim,
                step=node_id,
                status="timed_out",
                state=state,
                error={"type": "DeadlineExceeded", "message": "deadline passed", "step": node_id},
            )
            return Outcome("timed_out", steps)
        ctx = StepContext(
            run_id=run.id,
            step=node_id,
            attempt=attempt,
            project=run.project,
            session=flow_session,
            worker=claim.worker,
            fencing_token=claim.token,
            deadline=run.deadline,
            checkpoint_seq=checkpoint_seq,
            tenant_id=run.tenant_id,
            _watchdog=watchdog,
        )
        ref = ctx.ref
        spans.begin(node_id, attempt)
        watchdog.begin_step(node.timeout_seconds)
        try:
            try:
                # A fresh copy the handler may mutate, with large values read back from artifacts.
                working_state = track.working_copy()
                with (
                    session_context.writing(
                        actor=f"run:{run.id}",
                        run_id=run.id,
                        step=node_id,
                        agent="",
                        fence=fence,
                        project=run.project,
                        decisions=LedgerDecisions(ref),
                        buffer=buffer,
                        effects=ctx.effect,
                        budget=functools.partial(budget_check, ref) if budgets else None,
                    ),
                    log_context(step=node_id),
                    observe_step(run.workflow),
                ):
                    if budgets:
                        budget_check(ref)
                    result = _call(node, handlers[node_id], working_state, ctx)
                _check_overrun(node, watchdog.step_started)
            finally:
                # Ended before the handlers below run, so no stop can reach them. A stop that
                # surfaces as the step ends is still the step's: handled below as such.
                try:
                    watchdog.end_step()
                except StepInterrupted:
                    watchdog.end_step()
                    raise
        except StepSuspended:
            return Outcome("waiting", steps)
        except LeaseLost:
            return Outcome("lost", steps)
        except NeedsReview as review:
            _flush_held(buffer, claim)
            services.run_needs_review(
                run_id=run.id, token=claim.token, reason=review.reason, data=review.data
            )
            return Outcome("needs_review", steps)
        except (session_services.StaleFence, services.StaleLease):
            return Outcome("lost", steps)
        except DeadlineExceeded as exc:
            _flush_held(buffer, claim)
            services.run_fail(
                claim=claim,
                step=node_id,
                status="timed_out",
                state=state,
                error=_error(exc, node_id, attempt) | {"message": "deadline passed"},
            )
            return Outcome("timed_out", steps)
        except BaseException as exc:  # the step failed: retry or fail, as declared
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            if watchdog.lost:
                return Outcome("lost", steps)
            _flush_held(buffer, claim)
            return _step_failed(claim, node, attempt, exc, state)
        steps += 1
        try:
            if node.kind == "router":
                route = plan.resolve_route(node_id, result)
                if route.fans_out:
                    assert route.join is not None
                    services.fanout_start(
                        claim=claim,
                        run=run,
                        router=node_id,
                        branches=route.targets,
                        join=route.join,
                        state=state,
                        checkpoint_seq=checkpoint_seq,
                        previous_state=track.committed,
                        attempt=attempt,
                        chunks=buffer.take(),
                    )
                    return Outcome("waiting", steps)
                change, next_nodes = None, [route.targets[0]]
                event, event_data = "router.decided", {"choice": route.targets[0]}
            else:
                change = track.change(
                    working_state if result is None else result,
                    where=f"the state step {node_id!r} returned",
                )
                check_state(plan, change.snapshot, step=node_id)
                next_nodes, event, event_data = list(node.successors), "step.completed", {}
        except (RouteError, TypeError, StateSchemaError) as exc:
            # Not retried: the same code returns the same thing again (as in OpenRath).
            _flush_held(buffer, claim)
            error = _error(exc, node_id, attempt)
            if isinstance(exc, StateSchemaError):
                error["details"] = exc.details
            services.run_fail(claim=claim, step=node_id, state=state, error=error)
            return Outcome("failed", steps)
        except DomainError as exc:  # the artifact store refused a large value: retry the step
            _flush_held(buffer, claim)
            return _step_failed(claim, node, attempt, exc, state)
        commits = not next_nodes or node.checkpoint or node.kind == "router" or joining
        if commits:
            commit = services.StepCommit(
                step=node_id,
                state=state if change is None else change.stored,
                state_text=track.stored_text() if change is None else change.text(),
                previous_state=track.committed,
                next_nodes=next_nodes,
                attempt=attempt,
                event=event,
                event_data=event_data,
                finish="succeeded" if not next_nodes else None,
                chunks=buffer.take(),
                # After take(), which advances it: the length the append must end at, so the
                # run's update need not read the session again.
                session_len=buffer.stored_length,
            )
            if commit.finish is not None and watchdog.followed:
                # The run ends and a run waits for it: released in the same transaction.
                with transaction.atomic():
                    checkpoint_seq = services.checkpoint_commit(
                        claim=claim,
                        commit=commit,
                        checkpoint_seq=checkpoint_seq,
                        keyframes=keyframes,
                    )
                    services.run_release_followers(run_id=run.id)
            else:
                checkpoint_seq = services.checkpoint_commit(
                    claim=claim, commit=commit, checkpoint_seq=checkpoint_seq, keyframes=keyframes
                )
                if commit.finish is not None and run.input_session_id is not None:
                    # A run enqueued since the watchdog's last poll: its submission held this
                    # run's row until it committed, so the commit above came after it and this
                    # sees it (a crash in between: the reconciler releases it). A run with no
                    # input session skips the read (the hot path of sessionless runs): one
                    # enqueued on its working session in its last second waits for the
                    # reconciler's pass.
                    services.run_release_followers(run_id=run.id)
        if change is not None:
            track.advance(change, committed=commits)
        elif commits:
            track.checkpointed()
        if not next_nodes:
            return Outcome("succeeded", steps)
        if commits and watchdog.stop_requested:  # a step boundary: the interrupt stops it here
            services.run_interrupted(
                claim=claim, step=node_id, state=track.stored, checkpoint=checkpoint_seq
            )
            return Outcome("cancelled", steps)
        if commits and max_steps is not None and steps >= max_steps:
            return Outcome("running", steps)  # the lease stays this worker's until it expires
        if joining:
            services.fanout_clear(claim=claim)
            joining = False
        state, node_id, attempt = track.stored, next_nodes[0], 1


def _check_overrun(node: PlanNode, started: float) -> None:
    """A step that returned after its ``timeout_seconds`` timed out all the same (as in
    OpenRath): its result is discarded and the attempt fails with :class:`StepTimeout`
    (retried as declared, else ``timed_out``). Preemption stops the long ones; this catches
    the overruns that end before the watchdog's next look."""
    if node.timeout_seconds is None:
        return
    elapsed = time.monotonic() - started
    if elapsed > node.timeout_seconds:
        raise StepTimeout(
            f"step {node.id!r} ran {elapsed:.3f}s, over its timeout_seconds="
            f"{node.timeout_seconds:g}; its result is discarded"
        )


def _step_failed(
    claim: services.Claim, node: PlanNode, attempt: int, exc: BaseException, state: dict[str, Any]
) -> Outcome:
    error = _error(exc, node.id, attempt)
    if isinstance(exc, DomainError):
        error["code"] = exc.code
    timed_out = isinstance(exc, StepTimeout | TimeoutError | asyncio.TimeoutError)
    logger.warning(
        "step %s attempt %s failed: %s",
        node.id,
        attempt,
        error["message"],
        extra={"step": node.id},  # logged after the step's own log context has ended
    )
    delay = node.retry.delay(attempt) if attempt < node.retry.max_attempts else None
    step_failed(error["message"], exc, retry_delay=delay)
    if delay is not None:
        services.run_schedule_retry(
            claim=claim, step=node.id, attempt=attempt, delay=delay, error=error
        )
        return Outcome("queued")
    services.run_fail(
        claim=claim,
        step=node.id,
        error=error,
        state=state,
        status="timed_out" if timed_out else "failed",
    )
    return Outcome("timed_out" if timed_out else "failed")


def run_one(
    worker: str,
    *,
    registry: WorkflowRegistry,
    run_id: uuid.UUID | None = None,
    process_mode: bool = False,
    skip_tenants: tuple[str, ...] = (),
) -> Outcome | None:
    """Claim one claimable run (or that one, outside ``skip_tenants``) and execute it;
    ``None`` when there was none."""
    close_old_connections()
    claim = services.lease_claim(worker=worker, run_id=run_id, skip_tenants=skip_tenants)
    if claim is None:
        return None
    return execute_claim(claim, registry=registry, process_mode=process_mode)
