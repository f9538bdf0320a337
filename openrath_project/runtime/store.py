"""Run stores: OpenRath's ``SQLiteRunStore`` / ``PostgresRunStore`` as facades over this
product's Django models and services (one implementation: every write goes through
``runs_app.services`` / ``runs_app.interrupts``, every read through the models).

Which database a store means
----------------------------
A process has one configured database (Django's ``default``). A store names it:

* in a plain script, before anything configured Django, ``SQLiteRunStore(path)`` /
  ``PostgresRunStore(dsn)`` *configures* it (``DATABASE_URL``) and the library bootstrap
  (``openrath_project.library``) sets Django up and migrates;
* in a library process already set up, a ``SQLiteRunStore`` naming another file re-points the
  process's database to that file (migrated on first use) — one store at a time per process,
  as OpenRath's tests use them; a ``PostgresRunStore`` must name the configured database;
* in a configured process (server, worker, pytest-django) the store must name the configured
  database, else :class:`StoreMismatch` says which one is configured.
  :meth:`RunStore.configured` is the store of whatever database is configured.

Runs a caller holds itself
--------------------------
OpenRath's tests drive the queue by hand: ``create_run(Run.create(plan_id=...))`` queues a run
of a plan no workflow compiles to (an *opaque* plan, ``services.run_create_opaque``: no worker
ever executes it, claims skip it), ``claim_next`` / ``transition_run(target=RUNNING)`` claim a
run with the workers' own ``services.lease_claim`` (fencing token, lease), and the effect
ledger's hand-written entries (``openrath_project.runtime.effects``) are fenced by that
lease. The leases this process holds by hand are kept in :func:`held_lease` (a hand claim has
no step running under it, so its holder is the caller).
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from openrath_project.library import ensure_ready, is_library_process
from openrath_project.runtime.models import (
    DECISION_OF_KIND,
    ApprovalDecision,
    Checkpoint,
    ConflictError,
    Interrupt,
    InterruptKind,
    InvalidRunTransition,
    Run,
    RunEvent,
    RunStatus,
    UnsupportedOperation,
    freeze,
    thaw,
)
from runs_app.events import openrath_event_type

__all__ = [
    "Claim",
    "Lease",
    "PostgresRunStore",
    "RunStore",
    "SQLiteRunStore",
    "StoreMismatch",
    "held_lease",
    "project_of",
]

#: Leases this process holds by hand (a store's ``claim_next`` / ``transition_run(RUNNING)``),
#: by run id: the service claim, whose token fences the effect ledger's hand-written entries.
_HELD: dict[uuid.UUID, Any] = {}
_HELD_LOCK = threading.Lock()


def held_lease(run_id: uuid.UUID | str) -> Any | None:
    """The service ``Claim`` this process holds by hand on the run, if any (it may be stale:
    every write under it is fenced by its token)."""
    with _HELD_LOCK:
        return _HELD.get(uuid.UUID(str(run_id)))


def _hold(claim: Any) -> None:
    with _HELD_LOCK:
        _HELD[claim.run_id] = claim


def project_of(tenant_slug: str, project_slug: str = "default") -> Any:
    """The project ``tenant_slug/project_slug``. In a library process (a plain script, a
    notebook, OpenRath's tests) a tenant or project named for the first time is created, as the
    library's own tenant is; in a configured process (server, worker, pytest-django) it must
    exist (``LookupError``), since tenants are created by an operator there."""
    from openrath_project.errors import Conflict
    from openrath_project.library import default_project, library_tenant_slug
    from openrath_project.tenancy.models import Project, Tenant
    from openrath_project.tenancy.services import project_create, tenant_create

    if tenant_slug == library_tenant_slug() and project_slug == "default":
        return default_project()
    project = (
        Project.objects.select_related("tenant")
        .filter(tenant__slug=tenant_slug, slug=project_slug)
        .first()
    )
    if project is not None:
        return project
    if not is_library_process():
        raise LookupError(
            f"no project {tenant_slug}/{project_slug}: create it (manage.py or the console) "
            "before submitting runs to it"
        )
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if tenant is None:
        try:
            tenant = tenant_create(slug=tenant_slug, name=tenant_slug)
        except Conflict:
            tenant = Tenant.objects.get(slug=tenant_slug)
    try:
        return project_create(tenant=tenant, slug=project_slug, name=project_slug)
    except Conflict:
        return Project.objects.get(tenant=tenant, slug=project_slug)


def _version_conflict(row: Any, expected: int) -> ConflictError:
    current = row.event_seq - 1
    return ConflictError(
        f"the run is at version {current}, not {expected}",
        code="version_conflict",
        details={"version": current},
    )


class StoreMismatch(ValueError):
    """The store names a database other than the one this process is configured with."""


def _settings_untouched() -> bool:
    from django.apps import apps
    from django.conf import settings

    # DATABASE_URL_FILE names the database as well (openrath_project.secretfiles).
    chosen = os.environ.get("DATABASE_URL") or os.environ.get("DATABASE_URL_FILE")
    return not apps.ready and not settings.configured and not chosen


def _bind_sqlite(path: Path) -> None:
    target = path.expanduser().resolve()
    if _settings_untouched():
        target.parent.mkdir(parents=True, exist_ok=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{target}"
    ensure_ready()
    from django.db import connections

    current = connections["default"].settings_dict
    if current["ENGINE"].endswith("sqlite3"):
        name = str(current["NAME"])
        if name == str(path) or (not name.startswith("file:") and Path(name).resolve() == target):
            return
        if is_library_process():
            _switch_sqlite(target)
            return
    raise StoreMismatch(
        f"SQLiteRunStore({str(path)!r}) names another database than this process's "
        f"({current['ENGINE'].rsplit('.', 1)[-1]} {current['NAME']!s}); in a configured process "
        "use RunStore.configured(), or set DATABASE_URL before the first import"
    )


def _switch_sqlite(target: Path) -> None:
    """Re-point a library process's SQLite database to ``target`` (migrated on first use)."""
    from django.db import connections

    from openrath_project.library import migrate_if_needed

    connection = connections["default"]
    connection.close()
    target.parent.mkdir(parents=True, exist_ok=True)
    connection.settings_dict["NAME"] = str(target)
    migrate_if_needed(target.parent)


def _bind_postgres(dsn: str) -> None:
    if _settings_untouched():
        os.environ["DATABASE_URL"] = dsn
    ensure_ready()
    from django.db import connections

    current = connections["default"].settings_dict
    wanted = urlsplit(dsn)
    same = (
        "postgresql" in current["ENGINE"]
        and unquote(wanted.path.lstrip("/")) == str(current["NAME"])
        and (wanted.hostname or "") in ("", str(current.get("HOST") or ""))
        and (wanted.port or None) in (None, int(current.get("PORT") or 5432))
    )
    if not same:
        raise StoreMismatch(
            f"PostgresRunStore names database {unquote(wanted.path.lstrip('/'))!r} on "
            f"{wanted.hostname or 'localhost'}, but this process uses "
            f"{current['ENGINE'].rsplit('.', 1)[-1]} {current['NAME']!s}; set DATABASE_URL to "
            "the same DSN (or use RunStore.configured())"
        )


class Lease:
    """A claim's lease: who holds it, its fencing token, when it expires."""

    def __init__(self, *, holder_worker_id: str, fencing_token: int, expires_at: datetime) -> None:
        self.holder_worker_id = holder_worker_id
        self.fencing_token = fencing_token
        self.expires_at = expires_at

    def __repr__(self) -> str:
        return f"Lease({self.holder_worker_id!r}, token={self.fencing_token})"


class Claim:
    """What ``claim_next`` returns: the run (now running) and its lease."""

    def __init__(self, run: Run, lease: Lease, claim: Any) -> None:
        self.run = run
        self.lease = lease
        self.service_claim = claim


class RunStore:
    """Reads and decisions over the product's runs (see the module docstring)."""

    def __init__(self) -> None:
        ensure_ready()
        #: The worker id of this store's hand claims (``transition_run(target=RUNNING)``).
        self.worker_id = f"store:{uuid.uuid4().hex[:12]}"

    @classmethod
    def configured(cls) -> RunStore:
        """The store of this process's configured database."""
        return cls()

    def close(self) -> None:
        from django.db import connections

        connections["default"].close()

    # -- helpers ------------------------------------------------------------------------------

    def _row(self, run_id: uuid.UUID | str) -> Any:
        from runs_app.models import Run as RunRow

        try:
            return RunRow.objects.select_related("tenant", "project").get(id=run_id)
        except RunRow.DoesNotExist:
            raise KeyError(f"no run {run_id}") from None

    def _value(self, row: Any) -> Run:
        from openrath_project import large_values

        return Run.of(
            row,
            tenant_slug=row.tenant.slug,
            project_slug=row.project.slug,
            state=large_values.hydrate(row.tenant_id, row.state),
        )

    # -- runs ---------------------------------------------------------------------------------

    def get_run(self, run_id: uuid.UUID | str) -> Run:
        return self._value(self._row(run_id))

    def list_runs(
        self, *, tenant_id: str | None = None, status: RunStatus | str | None = None
    ) -> tuple[Run, ...]:
        from runs_app.models import Run as RunRow

        rows = RunRow.objects.select_related("tenant", "project").order_by("created_at")
        if tenant_id is not None:
            rows = rows.filter(tenant__slug=tenant_id)
        if status is not None:
            rows = rows.filter(status=str(status))
        return tuple(self._value(row) for row in rows)

    def create_run(self, run: Run) -> Run:
        """Queue ``run`` (a :meth:`Run.create` value) as a run of an *opaque* plan: OpenRath
        names the plan by id, and no registered workflow compiles to it, so no worker ever
        executes it; the caller claims it (``claim_next``, ``transition_run(target=RUNNING)``)
        and records its effects by hand. Same checks, working session and ``run.created``
        event as ``LocalRuntime.submit`` (``services.run_create_opaque``): the tenant and
        project by :func:`project_of`; ``session_id`` naming a stored session of the project:
        the run works on a fork of it, else on a new session; the same ``idempotency_key``
        returns the first run, or ``ConflictError`` for another request. To run a workflow's
        steps, submit it (``LocalRuntime.submit``)."""
        from runs_app import services
        from sessions_app.models import Session

        if run.status is not RunStatus.QUEUED:
            raise InvalidRunTransition(
                f"a run is created queued, not {run.status.value}: create it, then move it "
                "(claim_next / transition_run)"
            )
        project = project_of(run.tenant_id, run.project)
        session = None
        if run.session_id is not None:
            session = Session.objects.filter(id=str(run.session_id), project=project).first()
        row, _created = services.run_create_opaque(
            project=project,
            plan_id=str(run.plan_id),
            revision_id=str(run.revision_id) if run.revision_id is not None else None,
            state=thaw(run.state),
            session=session,
            next_nodes=run.next_nodes,
            priority=run.priority,
            idempotency_key=run.idempotency_key,
            created_by=run.created_by,
        )
        return self.get_run(row.id)

    def transition_run(
        self,
        run_id: uuid.UUID | str,
        *,
        expected_version: int,
        target: RunStatus | str,
        reason: str = "",
        actor: str = "",
    ) -> Run:
        """Move a run by hand (an operator's action), guarded by ``expected_version``.

        ``running`` is a claim by this store (``services.lease_claim`` on that run, the default
        lease, a new fencing token held in :func:`held_lease`: the effect ledger's hand-written
        entries are fenced by it); ``cancelled`` cancels it (a worker still executing it loses
        its lease: its late checkpoint is refused); ``queued`` resumes a ``needs_review`` run;
        ``failed`` / ``timed_out`` end it. ``waiting`` is a step's own transition
        (``ctx.interrupt``).
        """
        from runs_app import services
        from runs_app.transitions import check_transition

        wanted = RunStatus(str(target))
        row = self._row(run_id)
        if row.event_seq - 1 != expected_version:
            raise _version_conflict(row, expected_version)
        check_transition(row.status, wanted.value)
        if wanted is RunStatus.RUNNING:
            return self._claim_by_hand(row, expected_version)
        if wanted is RunStatus.CANCELLED:
            services.run_cancel(run=row, reason=reason, actor=actor)
        elif wanted is RunStatus.QUEUED and row.status == "needs_review":
            services.run_resume(run=row, reason=reason or "resumed", actor=actor)
        elif wanted in (RunStatus.FAILED, RunStatus.TIMED_OUT):
            services.run_transition(
                run_id=row.id,
                to=wanted.value,
                event=f"run.{wanted.value}",
                expect=[row.status],
                data={"reason": reason, "by": actor},
                changes=services.RunChanges(
                    error={"type": "Operator", "message": reason or wanted.value}
                ),
            )
        else:
            raise UnsupportedOperation(
                f"transition_run(target={wanted.value!r}) from {row.status!r}",
                "that transition belongs to a worker's step (retry, interrupt), which makes it "
                "under its lease",
                "ctx.interrupt(...) in a @step, LocalRuntime.work_once()",
            )
        return self.get_run(row.id)

    def _claim_by_hand(self, row: Any, expected_version: int) -> Run:
        from runs_app import services

        claim = services.lease_claim(worker=self.worker_id, run_id=row.id, opaque=True)
        if claim is None:
            current = self._row(row.id)
            if current.event_seq - 1 != expected_version:
                raise _version_conflict(current, expected_version)
            raise ConflictError(
                f"run {row.id} is {current.status} but not claimable now (its retry timer is "
                "not due)",
                code="not_claimable",
                details={"wake_at": str(current.wake_at)},
            )
        _hold(claim)
        return self.get_run(row.id)

    # -- checkpoints and events ---------------------------------------------------------------

    def list_checkpoints(self, run_id: uuid.UUID | str) -> tuple[Checkpoint, ...]:
        from effects_app.models import EffectRecord
        from openrath_project import large_values
        from runs_app import services
        from runs_app.models import Checkpoint as CheckpointRow

        row = self._row(run_id)
        finished: list[datetime] = [
            at
            for at in EffectRecord.objects.filter(
                run_id=row.id, finished_at__isnull=False
            ).values_list("finished_at", flat=True)
            if at is not None
        ]
        values = []
        for checkpoint in CheckpointRow.objects.filter(run=row).order_by("seq"):
            state = large_values.hydrate(row.tenant_id, services.run_state_at(row, checkpoint.seq))
            values.append(
                Checkpoint(
                    run_id=row.id,
                    sequence=checkpoint.seq,
                    step=checkpoint.step,
                    state=freeze(state),
                    next_nodes=tuple(checkpoint.next_nodes or ()),
                    plan_hash=row.plan_id,
                    attempt=checkpoint.attempt,
                    fencing_token=checkpoint.fencing_token,
                    effect_watermark=len([at for at in finished if at <= checkpoint.created_at]),
                    created_at=checkpoint.created_at,
                )
            )
        return tuple(values)

    def latest_checkpoint(self, run_id: uuid.UUID | str) -> Checkpoint | None:
        checkpoints = self.list_checkpoints(run_id)
        return checkpoints[-1] if checkpoints else None

    def append_checkpoint(self, checkpoint: Checkpoint) -> None:
        Checkpoint.create()  # raises UnsupportedOperation, naming the alternative

    def list_run_events(self, run_id: uuid.UUID | str) -> tuple[RunEvent, ...]:
        from runs_app.models import RunEvent as EventRow

        row = self._row(run_id)
        return tuple(
            RunEvent(
                run_id=row.id,
                sequence=event.seq,
                type=openrath_event_type(event.type, event.data) or event.type,
                product_type=event.type,
                step=event.step,
                data=freeze(_event_data(event.type, event.data or {})),
                created_at=event.created_at,
            )
            for event in EventRow.objects.filter(run=row).order_by("seq")
        )

    # -- interrupts ---------------------------------------------------------------------------

    def _interrupt(self, row: Any) -> Interrupt:
        return Interrupt(
            id=row.id,
            run_id=row.run_id,
            tenant_id=row.tenant.slug,
            kind=InterruptKind(row.kind),
            step=row.step,
            request=freeze(
                row.request if isinstance(row.request, dict) else {"value": row.request}
            ),
            request_digest=row.request_digest,
            status=row.status,
            decision=row.decision,
            response=freeze(row.response),
            reason=row.reason,
            decided_by=row.resolved_by,
            expires_at=row.expires_at,
            created_at=row.created_at,
        )

    def get_interrupt(self, interrupt_id: uuid.UUID | str) -> Interrupt:
        from runs_app.models import Interrupt as InterruptRow

        return self._interrupt(InterruptRow.objects.select_related("tenant").get(id=interrupt_id))

    def list_interrupts(
        self,
        *,
        tenant_id: str | None = None,
        pending_only: bool = True,
        run_id: uuid.UUID | str | None = None,
    ) -> tuple[Interrupt, ...]:
        from runs_app.models import Interrupt as InterruptRow

        rows = InterruptRow.objects.select_related("tenant").order_by("created_at")
        if tenant_id is not None:
            rows = rows.filter(tenant__slug=tenant_id)
        if pending_only:
            rows = rows.filter(status="pending")
        if run_id is not None:
            rows = rows.filter(run_id=run_id)
        return tuple(self._interrupt(row) for row in rows)

    def decide_interrupt(
        self,
        interrupt_id: uuid.UUID | str,
        *,
        decision: ApprovalDecision,
        expected_run_version: int | None = None,
    ) -> Run:
        """Resolve a pending interrupt (``runs_app.interrupts.interrupt_resolve``) and return
        the run, requeued. ``EDIT`` is stored as ``edit`` with its payload, the edited request
        (required): the step sees ``decision.kind.value == "edit"`` and reads the edit from
        ``decision.payload``."""
        from runs_app.interrupts import interrupt_resolve
        from runs_app.models import Interrupt as InterruptRow

        row = InterruptRow.objects.get(id=interrupt_id)
        if expected_run_version is not None:
            current = self._row(row.run_id)
            if current.event_seq - 1 != expected_run_version:
                raise _version_conflict(current, expected_run_version)
        stored = DECISION_OF_KIND[decision.kind]
        payload = thaw(decision.payload) if decision.payload else None
        interrupt_resolve(
            interrupt=row,
            decision=stored,
            response=payload if stored != "respond" else (payload or {}),
            reason=decision.reason,
            actor=decision.actor_id,
        )
        return self.get_run(row.run_id)

    # -- leases -------------------------------------------------------------------------------

    def claim_next(
        self,
        *,
        worker_id: str,
        lease_seconds: int | None = None,
        now: datetime | None = None,
    ) -> Claim | None:
        """Claim the next queued run, of a workflow or of an opaque plan
        (``runs_app.services.lease_claim``; the database's clock decides what is due, ``now``
        is accepted for OpenRath's signature). The caller holds the lease (:func:`held_lease`):
        nothing executes the run's steps meanwhile."""
        from runs_app import services

        claim = services.lease_claim(worker=worker_id, lease_seconds=lease_seconds, opaque=True)
        if claim is None:
            return None
        _hold(claim)
        return self._claim(claim)

    def _claim(self, claim: Any) -> Claim:
        run = self.get_run(claim.run_id)
        assert run.lease_expires_at is not None
        lease = Lease(
            holder_worker_id=claim.worker,
            fencing_token=claim.token,
            expires_at=run.lease_expires_at,
        )
        return Claim(run, lease, claim)

    def renew_lease(
        self,
        run_id: uuid.UUID | str,
        *,
        worker_id: str,
        fencing_token: int,
        lease_seconds: int | None = None,
    ) -> Lease:
        """Extend the lease (the workers' heartbeat); ``ConflictError`` for a stale token."""
        from runs_app import services

        claim = services.Claim(
            run_id=uuid.UUID(str(run_id)),
            token=fencing_token,
            worker=worker_id,
            lease_seconds=lease_seconds,
        )
        if not services.lease_heartbeat(claim=claim):
            raise ConflictError(
                f"stale fencing token {fencing_token} for run {run_id}: the lease is not "
                "this worker's any more",
                code="stale_lease",
            )
        held = held_lease(run_id)
        if held is not None and held.token == fencing_token:
            _hold(claim)  # later heartbeats renew by the same amount
        run = self.get_run(run_id)
        assert run.lease_expires_at is not None
        return Lease(
            holder_worker_id=worker_id, fencing_token=fencing_token, expires_at=run.lease_expires_at
        )

    def assert_fencing_token(
        self, run_id: uuid.UUID | str, *, worker_id: str, fencing_token: int
    ) -> None:
        run = self.get_run(run_id)
        if (
            run.status is not RunStatus.RUNNING
            or run.fencing_token != fencing_token
            or run.lease_owner != worker_id
        ):
            raise ConflictError(
                f"stale fencing token {fencing_token} for run {run_id} (current "
                f"{run.fencing_token}, held by {run.lease_owner or 'nobody'})",
                code="stale_lease",
            )

    def requeue_expired_leases(self, *, now: datetime | None = None) -> tuple[uuid.UUID, ...]:
        """Requeue runs whose lease expired before ``now`` (the reconciler,
        ``runs_app.reconciler.reconcile``); returns their ids."""
        from django.utils import timezone

        from runs_app import reconciler
        from runs_app.models import Run as RunRow

        moment = now or timezone.now()
        expired = dict(
            RunRow.objects.filter(status="running", lease_expires_at__lt=moment).values_list(
                "id", "fencing_token"
            )
        )
        reconciler.reconcile(now=moment)
        moved = RunRow.objects.filter(id__in=list(expired)).exclude(status="running")
        return tuple(sorted(moved.values_list("id", flat=True), key=str))


def _event_data(product_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """Event data with OpenRath's ``error_type`` next to the product's ``type``."""
    if product_type in ("run.failed", "run.timed_out", "step.retry_scheduled") and "type" in data:
        return {**data, "error_type": data["type"]}
    return data


class SQLiteRunStore(RunStore):
    """The embedded profile's store: ``SQLiteRunStore(path)`` (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        _bind_sqlite(self.path)
        super().__init__()


#: OpenRath's rule for a schema name: a safe, lower-case PostgreSQL identifier.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresRunStore(RunStore):
    """The production profile's store: ``PostgresRunStore(dsn)`` must name the configured
    database (or configure it, in a plain script).

    OpenRath's keywords, with its meaning where the product has one:

    * ``auto_migrate=True`` applies the migrations (``openrath-migrate``: the owner role from
      ``MIGRATION_DATABASE_URL`` when set, then the runtime role's grants);
    * ``schema=`` names the PostgreSQL schema the tables live in: it must be the schema the
      connection uses (``current_schema()``); choose it in the DSN
      (``?options=-csearch_path%3D<schema>``), else :class:`StoreMismatch`;
    * ``pool_max_size=`` bounds the process's pooled connections: in a plain script it turns
      on Django's psycopg pool of that size (``DATABASE_POOL``, ``DATABASE_POOL_MAX_SIZE``);
      in a configured process it must be the configured pool's size, else
      :class:`StoreMismatch` naming the settings.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        auto_migrate: bool = False,
        pool_max_size: int | None = None,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError("dsn must not be empty")
        if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError("schema must be a safe lower-case PostgreSQL identifier")
        if pool_max_size is not None and (
            isinstance(pool_max_size, bool)
            or not isinstance(pool_max_size, int)
            or pool_max_size < 1
        ):
            raise ValueError("pool_max_size must be a positive integer")
        self.dsn = dsn
        self.schema = schema
        if pool_max_size is not None and _settings_untouched():
            os.environ["DATABASE_POOL"] = "true"
            os.environ["DATABASE_POOL_MAX_SIZE"] = str(pool_max_size)
        _bind_postgres(dsn)
        super().__init__()
        if auto_migrate:
            import io

            from django.core.management import call_command

            call_command("openrath_migrate", stdout=io.StringIO())
        if schema is not None:
            _check_schema(schema)
        if pool_max_size is not None:
            _check_pool(pool_max_size)


def _check_schema(schema: str) -> None:
    from django.db import connections

    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        row = cursor.fetchone()
    current = row[0] if row else None
    if current != schema:
        raise StoreMismatch(
            f"PostgresRunStore(schema={schema!r}): this process's tables are in schema "
            f"{current!r}; put the schema in the DSN's search path "
            f"(?options=-csearch_path%3D{schema}) and migrate there (openrath-migrate)"
        )


def _check_pool(size: int) -> None:
    from django.db import connections

    pool = connections["default"].settings_dict.get("OPTIONS", {}).get("pool")
    configured = pool.get("max_size") if isinstance(pool, dict) else None
    if configured != size:
        raise StoreMismatch(
            f"PostgresRunStore(pool_max_size={size}): this process's database "
            + (f"pool holds at most {configured} connections" if configured else "has no pool")
            + "; set DATABASE_POOL=true and DATABASE_POOL_MAX_SIZE before Django starts (or "
            "leave pool_max_size out)"
        )
