"""Durable interrupts: a run waits for a person's decision, with its lease released.

``ctx.interrupt(kind, request, timeout_seconds=None, schema=None)`` creates a pending
:class:`Interrupt`, moves the run to ``waiting`` and ends the worker's turn. Resolving it
(API, console, admin) validates the response against the schema, records who decided what
(bound to the request's digest) and requeues the run; the step runs again from its start and
the same call now returns the :class:`Decision`. Expiry (the reconciler) applies the declared
default; with none declared the run ends ``timed_out``. A second resolution is a 409.

Lifecycle (``runs_app.transitions.INTERRUPT``): ``pending -> resolved | expired``, both
terminal. Every status change is one compare-and-set (``services.ledger_transition``) in the
transaction that also moves the run; it locks the run row first, then the interrupt.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from openrath_project.errors import Conflict, ValidationFailed
from openrath_project.jsontext import digest
from openrath_project.prepared import PreparedQuery
from runs_app import services
from runs_app.control import InterruptRejected, StepSuspended
from runs_app.models import DECISIONS, INTERRUPT_KINDS, Interrupt, Run
from runs_app.step import StepRef
from runs_app.tracing import traced_interrupt_request, traced_interrupt_resolve
from runs_app.transitions import INTERRUPT, UNSET, Changes, Unset
from sessions_app import services as session_services

#: Decisions that let the step go on (``reject`` stops it), and those that must carry a
#: ``response`` (``edit``: the edited request the step continues with).
_APPROVING = ("approve", "respond", "edit")
_CARRY_RESPONSE = ("respond", "edit")


@dataclass(frozen=True)
class DecisionKind:
    """``decision.kind.value`` works as in OpenRath's ``ApprovalDecision``."""

    value: str

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DecisionKind):
            return other.value == self.value
        return getattr(other, "value", other) == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Decision:
    """What an operator decided: ``decision`` (approve, reject, respond, edit), their
    ``response`` (validated against the interrupt's schema; for ``edit``, the edited request),
    ``reason``, ``resolved_by``."""

    decision: str
    response: Any
    reason: str
    resolved_by: str
    interrupt_id: str
    expired: bool = False

    @property
    def approved(self) -> bool:
        return self.decision in _APPROVING

    # OpenRath 2.0's ApprovalDecision names
    @property
    def kind(self) -> DecisionKind:
        return DecisionKind(self.decision)

    @property
    def actor_id(self) -> str:
        return self.resolved_by

    @property
    def payload(self) -> Any:
        return self.response if self.response is not None else {}


def _kind(kind: Any) -> str:
    value = str(getattr(kind, "value", kind)).lower()
    if value not in INTERRUPT_KINDS:
        raise ValueError(
            f"interrupt kind must be one of {', '.join(INTERRUPT_KINDS)}; got {kind!r}"
        )
    return value


def _decision_of(interrupt: Interrupt) -> Decision:
    return Decision(
        decision=interrupt.decision,
        response=interrupt.response,
        reason=interrupt.reason,
        resolved_by=interrupt.resolved_by,
        interrupt_id=str(interrupt.id),
        expired=interrupt.status == "expired",
    )


@traced_interrupt_request
def interrupt_request(
    ref: StepRef,
    *,
    kind: Any,
    request: Any,
    timeout_seconds: float | None,
    schema: dict[str, Any] | None,
    title: str,
    default: dict[str, Any] | None,
    sequence: int,
    raise_on_reject: bool = True,
    step: str | None = None,
) -> Decision:
    """The step-facing half: return the decision if there is one, else wait for it (the run
    moves to ``waiting`` under ``ref``'s lease and the step stops with ``StepSuspended``)."""
    kind_value = _kind(kind)
    try:
        payload = json.loads(json.dumps(request, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"an interrupt's request must be JSON: {exc}") from exc
    if schema is not None:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise ValueError(f"invalid response schema: {exc.message}") from exc
    if default is not None and default.get("decision", "reject") not in DECISIONS:
        raise ValueError(f"default decision must be one of {', '.join(DECISIONS)}")
    if timeout_seconds is not None and timeout_seconds <= 0:
        raise ValueError("timeout_seconds must be greater than zero")
    step_name = step or ref.step
    existing = Interrupt.objects.filter(
        run_id=ref.run_id, checkpoint_seq=ref.checkpoint_seq, step=step_name, sequence=sequence
    ).first()
    if existing is not None and existing.status != "pending":
        decision = _decision_of(existing)
        if decision.decision == "reject" and raise_on_reject:
            raise InterruptRejected(decision)
        return decision
    expires_at: datetime | None = (
        timezone.now() + timedelta(seconds=timeout_seconds) if timeout_seconds else None
    )
    # What the step wrote so far is kept (visible in lineage) before the run stops writing.
    session_services.flush_buffer(session_id=ref.session_id)
    with transaction.atomic():
        if existing is None:
            try:
                with transaction.atomic():
                    existing = Interrupt.objects.create(
                        tenant_id=ref.tenant_id,
                        project_id=ref.project_id,
                        run_id=ref.run_id,
                        step=step_name,
                        checkpoint_seq=ref.checkpoint_seq,
                        sequence=sequence,
                        kind=kind_value,
                        title=(title or _title(kind_value, payload))[:300],
                        request=payload,
                        request_digest=digest(payload),
                        schema=schema,
                        expires_at=expires_at,
                        default=default,
                    )
            except IntegrityError:
                existing = Interrupt.objects.get(
                    run_id=ref.run_id,
                    checkpoint_seq=ref.checkpoint_seq,
                    step=step_name,
                    sequence=sequence,
                )
        services.run_transition(
            run_id=ref.run_id,
            to="waiting",
            event="run.waiting",
            step=ref.step,
            token=ref.fencing_token,
            data={"interrupt": str(existing.id), "kind": existing.kind, "title": existing.title},
        )
    raise StepSuspended()


def _title(kind: str, payload: Any) -> str:
    if isinstance(payload, dict):
        for key in ("title", "question", "message", "summary"):
            if isinstance(payload.get(key), str):
                return payload[key]
    return f"{kind} requested"


def check_response(schema: dict[str, Any] | None, response: Any) -> None:
    """400 naming the field when the response breaks the interrupt's schema."""
    if schema is None:
        return
    errors = sorted(
        Draft202012Validator(schema).iter_errors(response), key=lambda e: list(e.absolute_path)
    )
    if errors:
        details: dict[str, list[str]] = {}
        for error in errors:
            path = "response" + "".join(f".{p}" for p in error.absolute_path)
            details.setdefault(path, []).append(error.message)
        first = next(iter(details))
        raise ValidationFailed(
            f"response does not match the schema: {first}: {details[first][0]}", details=details
        )


@dataclass(frozen=True)
class InterruptChanges(Changes):
    """What a decided (or expired) interrupt records, besides its status."""

    decision: str | Unset = UNSET
    response: Any | Unset = UNSET
    reason: str | Unset = UNSET
    resolved_by: str | Unset = UNSET
    resolved_at: datetime | Unset = UNSET


#: Every resolve reads both, locked (compiled once: openrath_project/prepared.py).
_RUN_LOCKED: PreparedQuery[Run] = PreparedQuery(
    Run, lambda run_id: Run.objects.select_for_update().filter(id=run_id), run_id=uuid.UUID
)
_INTERRUPT_LOCKED: PreparedQuery[Interrupt] = PreparedQuery(
    Interrupt,
    lambda interrupt_id: Interrupt.objects.select_for_update().filter(id=interrupt_id),
    interrupt_id=uuid.UUID,
)


def _lock(interrupt: Interrupt) -> tuple[Run, Interrupt]:
    """Lock the interrupt's run, then the interrupt (the lock order: run first); the caller is
    in a transaction and re-checks both statuses."""
    run = _RUN_LOCKED.get(run_id=interrupt.run_id)
    return run, _INTERRUPT_LOCKED.get(interrupt_id=interrupt.id)


def _already_decided(interrupt: Interrupt) -> Conflict:
    return Conflict(
        f"the interrupt is already {interrupt.status}",
        code="already_resolved",
        details={"status": interrupt.status, "decision": interrupt.decision},
    )


@traced_interrupt_resolve
def interrupt_resolve(
    *,
    interrupt: Interrupt,
    decision: str,
    response: Any = None,
    reason: str = "",
    request_digest: str | None = None,
    actor: str = "",
    locked_run: Run | None = None,
) -> Interrupt:
    """Resolve a pending interrupt once and requeue its run (``pending -> resolved`` and the
    run's ``waiting -> queued`` in one transaction).

    409 ``already_resolved`` when someone decided first (or it expired), ``digest_mismatch``
    when the request is not the one the caller saw, ``illegal_transition`` when the run no
    longer waits. Locks the run, then the interrupt. ``locked_run``: the interrupt's run, read
    and locked FOR UPDATE by the caller in the transaction it has open (the API's resolve:
    ``selectors.interrupt_get(lock_run=True)``); it is not read again and no savepoint is
    taken, so an error rolls back the caller's transaction.
    """
    if locked_run is not None and locked_run.id != interrupt.run_id:
        raise ValueError("locked_run is not the interrupt's run")
    if decision not in DECISIONS:
        raise ValidationFailed(
            f"decision must be one of {', '.join(DECISIONS)}",
            details={"decision": ["unknown decision"]},
        )
    if decision in _CARRY_RESPONSE and response is None:
        raise ValidationFailed(
            f"a {decision} decision needs a response"
            + (" (the edited request)" if decision == "edit" else ""),
            details={"response": [f"required for {decision}"]},
        )
    with transaction.atomic(savepoint=locked_run is None):
        # The run is locked; the interrupt is not read again. Its request, digest and schema
        # never change after it is created, and its status changes only under its run's lock
        # (ledger_transition), so the read the caller made is stale at most in its status: the
        # compare-and-set below then finds it decided, and so does the check of a run that no
        # longer waits.
        run = locked_run if locked_run is not None else _RUN_LOCKED.get(run_id=interrupt.run_id)
        locked = interrupt
        if locked.status != "pending":
            raise _already_decided(locked)
        if request_digest is not None and request_digest != locked.request_digest:
            raise Conflict(
                "request_digest does not match the interrupt's request: reload and review",
                code="digest_mismatch",
                details={"request_digest": locked.request_digest},
            )
        if decision in _APPROVING and response is not None:
            check_response(locked.schema, response)
        if run.status != "waiting":
            current = _INTERRUPT_LOCKED.get(interrupt_id=locked.id)
            if current.status != "pending":  # decided since the caller read it
                raise _already_decided(current)
            raise Conflict(
                f"the run is {run.status}, no longer waiting for this interrupt",
                code="illegal_transition",
                details={"run_status": run.status},
            )
        changes = InterruptChanges(
            decision=decision,
            response=response,
            reason=reason[:500],
            resolved_by=actor[:200],
            resolved_at=timezone.now(),
        )
        moved = services.ledger_transition(
            machine=INTERRUPT,
            model=Interrupt,
            pk=locked.id,
            run_id=run.id,
            to="resolved",
            sources=["pending"],
            changes=changes,
            locked_run=run,  # locked above: neither read nor locked again
            run_move=services.RunMove(
                to="queued",
                event="interrupt.resolved",
                step=locked.step,
                expect=["waiting"],
                data={
                    "interrupt": str(locked.id),
                    "decision": decision,
                    "by": actor,
                    "request_digest": locked.request_digest,
                },
            ),
        )
        if not moved:  # decided between the caller's read and the run's lock
            raise _already_decided(_INTERRUPT_LOCKED.get(interrupt_id=locked.id))
        # The row as the UPDATE left it, without reading it back: it is locked, and only these
        # columns changed (the response as its JSON column returns it).
        locked.status = "resolved"
        for name, value in changes.columns().items():
            setattr(locked, name, value)
        if response is not None:
            locked.response = json.loads(json.dumps(response))
    return locked


def interrupts_expire(*, now: datetime | None = None) -> int:
    """Expire pending interrupts past their ``expires_at`` (reconciler).

    With a declared ``default`` the default is the decision and the run is requeued (the step
    sees it, ``expired`` true). Without one the interrupt is recorded as rejected by expiry
    and the run ends ``timed_out`` (``InterruptExpired``), as in OpenRath 2.0: nobody
    decided in time, and nothing was declared to stand in for a decision. A run that no longer
    waits (cancelled meanwhile) is left as it is; the expiry is still recorded. Each interrupt
    is one transaction that locks the run, then the interrupt.
    """
    now = now or timezone.now()
    expired = 0
    due = Interrupt.objects.filter(status="pending", expires_at__lt=now).only("id", "run_id")
    for interrupt in due[:500]:
        with transaction.atomic():
            run, locked = _lock(interrupt)
            if locked.status != "pending":
                continue  # decided meanwhile
            default = locked.default
            move = None
            if run.status == "waiting":
                move = (
                    services.RunMove(
                        to="queued",
                        event="interrupt.expired",
                        step=locked.step,
                        expect=["waiting"],
                        data={
                            "interrupt": str(locked.id),
                            "decision": (default or {}).get("decision", "reject"),
                        },
                    )
                    if default is not None
                    else _expire_run(locked)
                )
            if services.ledger_transition(
                machine=INTERRUPT,
                model=Interrupt,
                pk=locked.id,
                run_id=run.id,
                to="expired",
                sources=["pending"],
                changes=InterruptChanges(
                    decision=(default or {}).get("decision", "reject"),
                    response=(default or {}).get("response"),
                    reason="expired",
                    resolved_by="system:expiry",
                    resolved_at=now,
                ),
                run_move=move,
            ):
                expired += 1
    return expired


def _expire_run(interrupt: Interrupt) -> services.RunMove:
    """The run waited past the interrupt's expiry with no default: it ends ``timed_out``."""
    assert interrupt.expires_at is not None
    waited = (interrupt.expires_at - interrupt.created_at).total_seconds()
    error = {
        "type": "InterruptExpired",
        "message": f"interrupt {interrupt.title!r} was not decided within {round(waited, 1):g}s "
        "and declares no default",
        "step": interrupt.step,
        "interrupt": str(interrupt.id),
    }
    return services.RunMove(
        to="timed_out",
        event="run.timed_out",
        step=interrupt.step,
        expect=["waiting"],
        data={**error, "reason": "interrupt expired"},
        changes=services.RunChanges(error=error),
    )
