"""The effect ledger, OpenRath-shaped: reads of the product's ``effects_app`` records, the
argument digest, and reconciliation through the product's reconciler.

In this product an effect is recorded by ``ctx.effect(key, fn, ...)`` inside a step, fenced by
the run's lease (``effects_app.services.effect_call``); nothing writes the ledger from outside
a step, so ``prepare`` / ``mark_dispatched`` / ``complete`` / ``fail`` say so and name the
alternative. A crashed effect is decided when the run is taken over: an idempotent one is
called again, a non-idempotent one parks the run in ``needs_review`` for a person.
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
    Invocation,
    UnsupportedOperation,
    freeze,
)

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
    """What :func:`reconcile_stale_effects` did: runs requeued for takeover, effects waiting
    for a person, effects that will be called again."""

    requeued_runs: tuple[uuid.UUID, ...] = ()
    needs_review: tuple[uuid.UUID, ...] = ()
    retryable: tuple[uuid.UUID, ...] = ()


_WRITES_IN_STEPS = (
    "effects are recorded inside a step by ctx.effect(key, fn, ...), fenced by the run's lease",
    "ctx.effect('key', fn, *args, idempotent=...) in a @step",
)


class EffectLedger:
    """The ledger of the configured database."""

    def __init__(self, location: str | None = None) -> None:
        self.location = location
        ensure_ready()

    def _value(self, record: Any) -> Invocation:
        return Invocation(
            id=record.id,
            run_id=record.run_id,
            step=record.step,
            tool_name=record.key,
            idempotency_key=record.idempotency_key,
            effect_class=record.effect_class,
            arguments_digest=record.request_digest,
            status=INVOCATION_STATUS_OF[record.status],
            result=freeze(record.result),
            error=freeze(record.error),
            attempts=record.attempts,
        )

    def get(self, invocation_id: uuid.UUID | str) -> Invocation:
        from effects_app.models import EffectRecord

        return self._value(EffectRecord.objects.get(id=invocation_id))

    def list_for_run(self, run_id: uuid.UUID | str) -> tuple[Invocation, ...]:
        from effects_app.models import EffectRecord

        rows = EffectRecord.objects.filter(run_id=run_id).order_by("created_at")
        return tuple(self._value(row) for row in rows)

    def watermark(self, run_id: uuid.UUID | str) -> int:
        """How many of the run's effects have finished."""
        from effects_app.models import EffectRecord

        return EffectRecord.objects.filter(run_id=run_id, finished_at__isnull=False).count()

    def prepare(self, **_: Any) -> Invocation:
        raise UnsupportedOperation("EffectLedger.prepare", *_WRITES_IN_STEPS)

    def mark_dispatched(self, invocation_id: uuid.UUID | str) -> Invocation:
        raise UnsupportedOperation("EffectLedger.mark_dispatched", *_WRITES_IN_STEPS)

    def complete(self, invocation_id: uuid.UUID | str, result: object) -> Invocation:
        raise UnsupportedOperation("EffectLedger.complete", *_WRITES_IN_STEPS)

    def fail(self, invocation_id: uuid.UUID | str, error: str) -> Invocation:
        raise UnsupportedOperation("EffectLedger.fail", *_WRITES_IN_STEPS)

    def reconcile_stale(self, *, older_than: datetime) -> tuple[Invocation, ...]:
        return reconcile_stale_effects(self, None, now=older_than, grace_seconds=0).effects


class SQLiteEffectLedger(EffectLedger):
    """``SQLiteEffectLedger(path)``: the ledger in the store's database (bind the store first)."""


class PostgresEffectLedger(EffectLedger):
    """``PostgresEffectLedger(dsn)``: the ledger in the store's database."""


@dataclass(frozen=True)
class _Result(Reconciliation):
    effects: tuple[Invocation, ...] = ()


def reconcile_stale_effects(
    ledger: EffectLedger,
    store: Any,
    *,
    grace_seconds: float = 0,
    now: datetime | None = None,
) -> _Result:
    """Requeue runs whose worker died (their leases expired ``grace_seconds`` before ``now``),
    with the product's reconciler; the next claim decides each started effect by its class.
    Returns the requeued runs and their started effects, split by class."""
    from django.utils import timezone

    from effects_app.models import EffectRecord
    from runs_app import reconciler
    from runs_app.models import Run as RunRow

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
    started = list(EffectRecord.objects.filter(run_id__in=requeued, status="started"))
    return _Result(
        requeued_runs=requeued,
        needs_review=tuple(r.id for r in started if r.effect_class != "idempotent"),
        retryable=tuple(r.id for r in started if r.effect_class == "idempotent"),
        effects=tuple(ledger._value(r) for r in started),
    )
