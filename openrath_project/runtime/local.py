"""``LocalRuntime``: OpenRath's in-process runtime, driving the product's own engine.

Every call goes through what the workers use: ``submit`` is ``runs_app.services.run_create``;
``work_once`` claims with ``services.lease_claim`` (fencing token, lease) and executes with
``runs_app.executor.execute_claim`` (checkpoints, watchdog, the effect ledger); leases and
timers are the reconciler's (``runs_app.reconciler.reconcile``). Nothing here writes a run itself.

A runtime claims only runs of the workflows registered *on it*: a script sharing a database
with a server never takes the server's runs (nor the other way round: the server's embedded
workers skip the library tenant).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from openrath_project.context import RunContext
from openrath_project.jsontext import digest
from openrath_project.runtime.effects import EffectLedger, Reconciliation, reconcile_stale_effects
from openrath_project.runtime.models import Run, RunStatus, SchemaValidationError
from openrath_project.runtime.store import RunStore, project_of

__all__ = ["LocalRuntime"]

_WAITING_FOR_PEOPLE = (RunStatus.WAITING, RunStatus.NEEDS_REVIEW)


def _project(context: RunContext) -> Any:
    """The context's project (tenant slug / project slug): :func:`store.project_of`."""
    return project_of(context.tenant_id, context.project)


def _check_schema(schema: Any, value: Any, where: str) -> None:
    if not schema:
        return
    import jsonschema

    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        raise SchemaValidationError(f"{where} does not match the schema: {exc.message}") from None


class LocalRuntime:
    """Submit runs and execute them in this process, through the workers' own path."""

    def __init__(
        self,
        store: RunStore | None = None,
        *,
        effect_ledger: EffectLedger | None = None,
        production_mode: bool = False,
        registry: Any = None,
    ) -> None:
        from runs_app.registry import WorkflowRegistry

        self.store = store if store is not None else RunStore.configured()
        self.effect_ledger = effect_ledger if effect_ledger is not None else EffectLedger()
        if production_mode:
            from django.db import connection

            if connection.vendor != "postgresql":
                raise ValueError(
                    "production_mode=True needs the PostgreSQL store (PostgresRunStore); in "
                    "production, run the server and its workers (openrath-server, "
                    "openrath-worker) and list workflows in OPENRATH_WORKFLOW_MODULES"
                )
        self.production_mode = production_mode
        self.registry = registry if registry is not None else WorkflowRegistry()

    # -- workflows ----------------------------------------------------------------------------

    def register(self, workflow: Any, *, revision_id: uuid.UUID | None = None) -> Any:
        """Register a workflow *instance* (or a class the runtime can build with ``cls()``);
        returns the registry entry. ``revision_id`` is accepted for OpenRath's signature: a
        run pins the plan hash of the code, which is what identifies a revision here."""
        return self.registry.register(workflow)

    def _entry(self, workflow: Any) -> Any:
        from sessions_app.workflow import workflow_name

        if isinstance(workflow, str):
            return self.registry.get(workflow)
        name = workflow_name(workflow)
        current = self.registry.get(name) if name in self.registry else None
        if current is None or (not isinstance(workflow, type) and current.instance is not workflow):
            return self.register(workflow)
        return current

    # -- runs ---------------------------------------------------------------------------------

    def submit(
        self,
        workflow: Any,
        *,
        session_id: uuid.UUID | str | None = None,
        context: RunContext | None = None,
        state: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        priority: int = 0,
        input_policy: str | None = None,
    ) -> Run:
        """Queue a run (``runs_app.services.run_create``) and return it.

        ``session_id`` naming a stored session of the project: the run works on a fork of it;
        any other id (OpenRath callers often pass a fresh ``uuid4()``): the run gets a new
        working session. The same ``idempotency_key`` with the same request returns the first
        run; with a different request it raises ``ConflictError``. ``input_policy``: what to
        do when that session has an active run (``reject``, ``enqueue``, ``interrupt``,
        ``rollback``; default: the workflow's, else ``reject``: docs/concurrent-input.md).
        """
        from runs_app import services
        from sessions_app.models import Session

        entry = self._entry(workflow)
        context = context or RunContext.local()
        initial = dict(state or {})
        _check_schema(getattr(entry.cls, "input_schema", None), initial, "the submitted state")
        project = _project(context)
        session = None
        if session_id is not None:
            session = Session.objects.filter(id=str(session_id), project=project).first()
        request_digest = digest(
            {
                "workflow": entry.name,
                "state": initial,
                "session": str(session_id) if session_id is not None else None,
                "priority": priority,
                # Part of the request only when given: earlier digests stay the same.
                **({"input_policy": input_policy} if input_policy is not None else {}),
            }
        )
        row, _created = services.run_create(
            project=project,
            workflow=entry,
            state=initial,
            session=session,
            priority=priority,
            deadline=context.deadline,
            idempotency_key=idempotency_key,
            digest_of_request=request_digest,
            created_by=context.principal.actor,
            input_policy=input_policy,
        )
        return self.store.get_run(row.id)

    def work_once(
        self,
        *,
        worker_id: str | None = None,
        lease_seconds: int | None = None,
        max_steps: int | None = None,
        now: datetime | None = None,
    ) -> Run | None:
        """Claim one queued run of this runtime's workflows and execute it until it ends, waits
        for a person, or has run ``max_steps`` steps (it then stays ``running`` under this
        worker's lease until the lease expires). A step retry scheduled on the way is followed
        in this call: it waits for the durable timer and claims the run again. ``None`` when
        nothing was claimable. ``now`` is accepted for OpenRath's signature; the database's
        clock decides what is due."""
        from runs_app import services
        from runs_app.executor import execute_claim
        from runs_app.models import Run as RunRow

        worker = worker_id or f"local:{uuid.uuid4().hex[:8]}"
        names = tuple(self.registry.names())
        claim = services.lease_claim(worker=worker, workflows=names, lease_seconds=lease_seconds)
        if claim is None:
            return None
        steps_left = max_steps
        while True:
            outcome = execute_claim(claim, registry=self.registry, max_steps=steps_left)
            if steps_left is not None:
                steps_left -= outcome.steps
            row = RunRow.objects.only("status", "wake_at").get(id=claim.run_id)
            retrying = row.status == "queued" and row.wake_at is not None
            if not retrying or (steps_left is not None and steps_left <= 0):
                break
            _sleep_until(row.wake_at)
            claim = None
            while claim is None:  # another worker may hold it meanwhile: then it is theirs
                claim = services.lease_claim(
                    worker=worker, run_id=row.id, workflows=names, lease_seconds=lease_seconds
                )
                if claim is None:
                    current = RunRow.objects.only("status", "wake_at").get(id=row.id)
                    if current.status != "queued":
                        return self.store.get_run(row.id)
                    _sleep_until(current.wake_at)
        return self.store.get_run(claim.run_id)

    def run_until_done(
        self,
        run_id: uuid.UUID | str,
        *,
        worker_id: str | None = None,
        timeout: float | None = None,
        poll_seconds: float = 0.05,
    ) -> Run:
        """Drive one run until it ends or waits for a person (an interrupt, a review),
        sleeping through its durable timers (retry back-off) and requeueing an expired lease;
        ``TimeoutError`` after ``timeout`` seconds."""
        from runs_app import reconciler, services
        from runs_app.executor import execute_claim

        worker = worker_id or f"local:{uuid.uuid4().hex[:8]}"
        names = tuple(self.registry.names())
        started = time.monotonic()
        while True:
            run = self.store.get_run(run_id)
            if run.terminal or run.status in _WAITING_FOR_PEOPLE:
                return run
            if timeout is not None and time.monotonic() - started > timeout:
                raise TimeoutError(f"run {run_id} is still {run.status.value} after {timeout}s")
            claim = None
            if run.status is RunStatus.QUEUED:
                claim = services.lease_claim(worker=worker, run_id=run.id, workflows=names)
            if claim is not None:
                execute_claim(claim, registry=self.registry)
                continue
            reconciler.reconcile()  # an expired lease is requeued, a passed deadline ends it
            time.sleep(poll_seconds)

    def replay(self, run_id: uuid.UUID | str, *, actor: str = "") -> Run:
        """Replay a finished run against the workflows registered on this runtime
        (``runs_app.replay.replay_run``: nothing is called, performed or dispatched) and
        return the replay run; its ``output`` is the report (``identical``,
        ``steps_replayed``, ``first_difference``). ``Conflict`` unless the run succeeded or
        failed."""
        from runs_app.models import Run as RunRow
        from runs_app.replay import replay_run

        # scope: the caller holds the run's id; a runtime acts for its own process
        row = RunRow.objects.unscoped().select_related("project").get(id=str(run_id))
        replay = replay_run(run=row, actor=actor or "local", registry=self.registry)
        return self.store.get_run(replay.id)

    def fork(
        self,
        run_id: uuid.UUID | str,
        checkpoint: int,
        *,
        state_patch: Mapping[str, Any] | None = None,
        plan: str = "pinned",
        title: str = "",
        reason: str = "",
        context: RunContext | None = None,
    ) -> Run:
        """Queue a new run that continues ``run_id`` from checkpoint ``checkpoint`` (0: its
        start) with an RFC 7386 merge patch on its state (``runs_app.services.forks.run_fork``);
        ``plan="current"`` pins what the workflow registered on this runtime compiles to now.
        The parent is unchanged; drive the fork with ``work_once`` / ``run_until_done``."""
        from runs_app.models import Run as RunRow
        from runs_app.services.forks import run_fork

        context = context or RunContext.local()
        # scope: the caller holds the run's id; a runtime acts for its own process
        row = RunRow.objects.unscoped().select_related("plan").get(id=str(run_id))
        child = run_fork(
            run=row,
            checkpoint_seq=checkpoint,
            state_patch=dict(state_patch) if state_patch is not None else None,
            plan=plan,
            title=title,
            reason=reason,
            actor=context.principal.actor,
            registry=self.registry,
        )
        return self.store.get_run(child.id)

    # -- maintenance --------------------------------------------------------------------------

    def requeue_expired_leases(self, *, now: datetime | None = None) -> tuple[uuid.UUID, ...]:
        return self.store.requeue_expired_leases(now=now)

    def reconcile_effects(
        self, *, grace_seconds: float = 30.0, now: datetime | None = None
    ) -> Reconciliation:
        return reconcile_stale_effects(
            self.effect_ledger, self.store, grace_seconds=grace_seconds, now=now
        )


def _sleep_until(moment: datetime | None) -> None:
    from django.utils import timezone

    if moment is None:
        return
    delay = (moment - timezone.now()).total_seconds()
    if delay > 0:
        time.sleep(min(delay, 60.0))
