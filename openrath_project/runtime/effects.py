"""The effect ledger, OpenRath-shaped, over the product's ``effects_app`` records: reads, the
argument digest, hand-written entries fenced by a lease, and the takeover decision.

Inside a step an effect is recorded by ``ctx.effect(key, fn, ...)``
(``effects_app.services.effect_call``). OpenRath's callers also write the ledger by hand:
``prepare`` / ``mark_dispatched`` / ``complete`` / ``fail``. Here those go through the same
ledger services, fenced by the lease this process holds on the run by hand
(``store.claim_next`` or ``store.transition_run(..., target=RunStatus.RUNNING)``,
:func:`openrath_project.runtime.store.held_lease`): without such a lease, or once it is stale
(expired and taken over), a write is a ``ConflictError`` and changes nothing. A hand-written
entry has the step ``""`` and the caller's idempotency key as its key: the same key again
returns the recorded entry (a completed effect is not prepared twice), with another tool or
digest it is a conflict.

A crashed effect (``started``, its holder gone) is decided by the product's takeover decision
(``effects_app.services.effect_takeover``): an idempotent one may be called again, a
non-idempotent one parks the effect and its run in ``needs_review`` for a person.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from openrath_project.jsontext import digest
from openrath_project.library import ensure_ready
from openrath_project.runtime.models import (
    INVOCATION_STATUS_OF,
    ConflictError,
    Invocation,
    freeze,
)
from openrath_project.runtime.store import held_lease

__all__ = [
    "EffectLedger",
    "PostgresEffectLedger",
    "Reconciliation",
    "SQLiteEffectLedger",
    "arguments_digest",
    "reconcile_stale_effects",
]


def arguments_digest(arguments: Mapping[str, object]) -> str:
    """SHA-256 hex of the arguments' canonical JSON (the digest the ledger stores)."""
    return digest(dict(arguments))


@dataclass(frozen=True)
class Reconciliation:
    """What :func:`reconcile_stale_effects` did: the runs whose expired lease it requeued (their
    started effects are decided by whoever claims them next, as every takeover is), and the
    started effects it decided under a lease held by hand in this process: those that may be
    called again (``retryable``) and those parked for a person (``needs_review``)."""

    requeued_runs: tuple[uuid.UUID, ...] = ()
    needs_review: tuple[uuid.UUID, ...] = ()
    retryable: tuple[uuid.UUID, ...] = ()


_HEX64 = frozenset("0123456789abcdef")
#: OpenRath's effect classes that may be repeated after a crash (its reconciliation retries
#: them); every other class is recorded non-idempotent.
_RETRYABLE_CLASSES = ("none", "read_only", "idempotent")
_NO_LEASE = (
    "claim it first: store.claim_next(...) or store.transition_run(run_id, "
    "expected_version=..., target=RunStatus.RUNNING); inside a step use ctx.effect(...)"
)


def _class_value(effect_class: Any) -> str:
    return str(getattr(effect_class, "value", effect_class))


class EffectLedger:
    """The ledger of the configured database."""

    def __init__(self, location: str | None = None) -> None:
        self.location = location
        ensure_ready()

    def _value(self, record: Any) -> Invocation:
        request = record.request if isinstance(record.request, dict) else {}
        by_hand = "tool" in request
        return Invocation(
            id=record.id,
            run_id=record.run_id,
            step=record.step,
            tool_name=request["tool"] if by_hand else record.key,
            idempotency_key=request.get("idempotency_key") if by_hand else record.idempotency_key,
            effect_class=request.get("effect_class", record.effect_class),
            arguments_digest=record.request_digest,
            status=INVOCATION_STATUS_OF[record.status],
            result=freeze(record.result),
            error=freeze(record.error),
            attempts=record.attempts,
        )

    def get(self, invocation_id: uuid.UUID | str) -> Invocation:
        from effects_app.models import EffectRecord

        try:
            return self._value(EffectRecord.objects.get(id=invocation_id))
        except EffectRecord.DoesNotExist:
            raise KeyError(str(invocation_id)) from None

    def list_for_run(self, run_id: uuid.UUID | str) -> tuple[Invocation, ...]:
        from effects_app.models import EffectRecord

        rows = EffectRecord.objects.filter(run_id=run_id).order_by("created_at")
        return tuple(self._value(row) for row in rows)

    def watermark(self, run_id: uuid.UUID | str) -> int:
        """How many of the run's effects have finished."""
        from effects_app.models import EffectRecord

        return EffectRecord.objects.filter(run_id=run_id, finished_at__isnull=False).count()

    # -- hand-written entries, fenced by a lease held in this process ------------------------

    @staticmethod
    def _lease(run_id: Any) -> Any:
        claim = held_lease(run_id)
        if claim is None:
            raise ConflictError(
                f"no lease on run {run_id} is held in this process: {_NO_LEASE}",
                code="no_lease",
            )
        return claim

    @staticmethod
    def _refused(record_id: Any, claim: Any, wanted: str) -> ConflictError:
        """Why a fenced write changed nothing: a stale lease, or a record in another status."""
        from effects_app.models import EffectRecord
        from runs_app.models import Run as RunRow

        record = EffectRecord.objects.get(id=record_id)
        run = RunRow.objects.only("status", "fencing_token").get(id=record.run_id)
        if run.status != "running" or run.fencing_token != claim.token:
            return ConflictError(
                f"stale fencing token {claim.token} for run {record.run_id} (current "
                f"{run.fencing_token}, the run is {run.status}): the lease is not this "
                "process's any more",
                code="stale_lease",
            )
        return ConflictError(
            f"the effect is {INVOCATION_STATUS_OF[record.status].value}; it cannot be {wanted}",
            code="illegal_transition",
            details={"status": INVOCATION_STATUS_OF[record.status].value},
        )

    def prepare(
        self,
        *,
        run_id: uuid.UUID | str,
        tool_name: str,
        effect_class: Any,
        arguments_digest: str,
        idempotency_key: str | None,
        node_id: str | None = None,
        checkpoint_sequence: int | None = None,
    ) -> Invocation:
        """Record that the run is about to call ``tool_name`` with arguments of that digest
        (``prepared``), under the lease held on the run; the same ``idempotency_key`` again
        returns the recorded entry, whatever its status."""
        from effects_app.services import EffectConflict, effect_prepare

        if not isinstance(tool_name, str) or not tool_name:
            raise ValueError("tool_name must not be empty")
        if (
            not isinstance(arguments_digest, str)
            or len(arguments_digest) != 64
            or not set(arguments_digest) <= _HEX64
        ):
            raise ValueError("arguments_digest must be a SHA-256 hex digest (arguments_digest())")
        if idempotency_key is not None and not 0 < len(idempotency_key) <= 200:
            raise ValueError("an idempotency key is a non-empty string of at most 200 characters")
        claim = self._lease(run_id)
        declared = _class_value(effect_class)
        record = effect_prepare(
            run_id=claim.run_id,
            step="",
            key=idempotency_key or f"{tool_name}#{uuid.uuid4().hex}",
            effect_class="idempotent" if declared in _RETRYABLE_CLASSES else "non_idempotent",
            request={
                "tool": tool_name,
                "effect_class": declared,
                "idempotency_key": idempotency_key,
                "node_id": node_id,
                "checkpoint_sequence": checkpoint_sequence,
            },
            request_digest=arguments_digest,
            token=claim.token,
        )
        if record is None:
            raise ConflictError(
                f"stale fencing token {claim.token} for run {run_id}: the lease is not this "
                "process's any more",
                code="stale_lease",
            )
        recorded = record.request if isinstance(record.request, dict) else {}
        if record.request_digest != arguments_digest or recorded.get("tool") != tool_name:
            raise EffectConflict(
                f"effect idempotency key {idempotency_key!r} was used with another tool or "
                "other arguments",
                details={"effect": str(record.id), "recorded_digest": record.request_digest},
            )
        return self._value(record)

    def _record(self, invocation_id: uuid.UUID | str) -> Any:
        from effects_app.models import EffectRecord

        try:
            return EffectRecord.objects.get(id=invocation_id)
        except EffectRecord.DoesNotExist:
            raise KeyError(str(invocation_id)) from None

    def mark_dispatched(self, invocation_id: uuid.UUID | str) -> Invocation:
        """``prepared -> dispatched`` (the product's ``started``): the call is under way."""
        from effects_app.services import effect_mark_started

        record = self._record(invocation_id)
        claim = self._lease(record.run_id)
        if not effect_mark_started(record, claim.token):
            raise self._refused(record.id, claim, "dispatched")
        return self.get(record.id)

    def _finish(self, invocation_id: Any, *, result: Any = None, error: Any = None) -> Invocation:
        from effects_app.services import effect_mark_finished, effect_mark_started

        record = self._record(invocation_id)
        claim = self._lease(record.run_id)
        wanted = "failed" if error is not None else "completed"
        if record.status == "prepared" and not effect_mark_started(record, claim.token):
            raise self._refused(record.id, claim, wanted)
        if not effect_mark_finished(record, claim.token, result=result, error=error):
            raise self._refused(record.id, claim, wanted)
        return self.get(record.id)

    def complete(self, invocation_id: uuid.UUID | str, result: object) -> Invocation:
        """``-> succeeded`` with ``result`` (from ``prepared`` it is started first)."""
        return self._finish(invocation_id, result=result)

    def fail(self, invocation_id: uuid.UUID | str, error: str) -> Invocation:
        """``-> failed`` with ``error`` (from ``prepared`` it is started first)."""
        return self._finish(invocation_id, error={"type": "EffectFailed", "message": str(error)})

    def reconcile_stale(self, *, older_than: datetime) -> tuple[Invocation, ...]:
        """Decide the effects started before ``older_than`` under the leases this process
        holds by hand; returns them as decided."""
        return reconcile_stale_effects(self, None, now=older_than, grace_seconds=0).effects


class SQLiteEffectLedger(EffectLedger):
    """``SQLiteEffectLedger(path)``: the ledger in the store's database (bind the store first)."""


class PostgresEffectLedger(EffectLedger):
    """``PostgresEffectLedger(dsn, schema=...)``: the ledger in the store's database
    (``schema``, when given, is checked as ``PostgresRunStore`` checks it)."""

    def __init__(self, location: str | None = None, *, schema: str | None = None) -> None:
        super().__init__(location)
        self.schema = schema
        if schema is not None:
            from openrath_project.runtime.store import _SCHEMA_NAME, _check_schema

            if not _SCHEMA_NAME.fullmatch(schema):
                raise ValueError("schema must be a safe lower-case PostgreSQL identifier")
            _check_schema(schema)


@dataclass(frozen=True)
class _Result(Reconciliation):
    effects: tuple[Invocation, ...] = ()


def reconcile_stale_effects(
    ledger: EffectLedger,
    store: Any,
    *,
    grace_seconds: float = 30.0,
    now: datetime | None = None,
) -> _Result:
    """Recover effects whose caller crashed, ``grace_seconds`` before ``now``:

    * runs whose lease expired by then are requeued (the product's reconciler,
      ``runs_app.reconciler.reconcile``); whoever claims one next takes its started effects
      over, by the takeover decision;
    * the effects started by then under a lease this process holds by hand (no step runs
      under such a lease: its holder is the caller) are decided now, by the same decision
      (``effects_app.services.effect_takeover``), fenced by that lease: an idempotent one is
      ``retryable``, a non-idempotent one ``needs_review``, and its run goes to
      ``needs_review`` (``runs_app.services.run_needs_review``), as after a worker's takeover.
    """
    from django.utils import timezone

    from effects_app import services as effects
    from effects_app.models import EffectRecord
    from runs_app import reconciler
    from runs_app import services as run_services
    from runs_app.models import Run as RunRow

    if grace_seconds < 0:
        raise ValueError("grace_seconds must not be negative")
    moment = (now or timezone.now()) - timedelta(seconds=grace_seconds)
    expired = list(
        RunRow.objects.filter(status="running", lease_expires_at__lt=moment).values_list(
            "id", flat=True
        )
    )
    reconciler.reconcile(now=moment)
    requeued = tuple(
        RunRow.objects.filter(id__in=expired).exclude(status="running").values_list("id", flat=True)
    )
    started = EffectRecord.objects.filter(status="started", started_at__lte=moment).order_by(
        "created_at"
    )
    by_run: dict[uuid.UUID, list[Any]] = {}
    for record in started.exclude(run_id__in=requeued):
        claim = held_lease(record.run_id)
        if claim is not None:
            by_run.setdefault(record.run_id, []).append(record)
    retryable: list[Any] = []
    needs_review: list[Any] = []
    for run_id, records in by_run.items():
        claim = held_lease(run_id)
        assert claim is not None
        held = RunRow.objects.filter(id=run_id, status="running", fencing_token=claim.token)
        if not held.exists():
            continue  # a stale hold: whoever holds the run now decides
        parked = []
        for record in records:
            if effects.effect_takeover(record, claim.token):
                retryable.append(record)
            else:
                parked.append(record)
        if parked:
            needs_review.extend(parked)
            run_services.run_needs_review(
                run_id=run_id,
                token=claim.token,
                reason=effects.TAKEOVER_REVIEW_REASON,
                data=effects.takeover_details(parked[0]),
            )
    decided = [EffectRecord.objects.get(id=r.id) for r in (*retryable, *needs_review)]
    return _Result(
        requeued_runs=requeued,
        needs_review=tuple(r.id for r in needs_review),
        retryable=tuple(r.id for r in retryable),
        effects=tuple(ledger._value(r) for r in decided),
    )
