"""Effect ledger writes: record effects around their call, resolve ambiguous ones.

A step calls ``ctx.effect(key, fn, *args, idempotent=...)``; :func:`effect_call` runs ``fn`` at
most once per ``(run, step, key)``:

* ``started`` is committed before ``fn`` runs, fenced by the run's lease;
* a recorded success (or an operator's ``applied``) returns the recorded result, ``fn`` is not
  called again;
* a ``started`` row found on replay means the worker died during ``fn``: an idempotent effect
  is called again with the same idempotency key; a non-idempotent one turns the effect and the
  run into ``needs_review`` and is never called again on its own;
* the same key with a different request is an error (:class:`EffectConflict`).

A forked run (``runs_app.services.forks``) also looks at its ancestors' ledgers, any number of
generations up, the first time it reaches a key (:func:`_lineage_decision`): an ancestor's
committed effect from *before* the branch point is part of the state the fork starts from and
its result is returned, never re-run; one committed *after* the branch point happened in another
timeline: an idempotent effect with the same request digest reuses its result when the callable
opted in (:func:`reuse_in_forks`); otherwise the fork's record and the fork wait in
``needs_review`` (reason ``effect_in_ancestor``) until an operator answers ``perform_again``,
``reuse_ancestor`` or ``cancel_run``. Finding the record and whether the run is a fork is one
statement (an unforked run pays nothing more); the ancestors' ledgers are one more, for forks
only.

Lifecycle (``runs_app.transitions.EFFECT``): ``prepared | failed | resolved -> started``,
``started -> started | succeeded | failed | needs_review``, ``needs_review -> resolved``;
``succeeded`` is terminal. Every status change is one compare-and-set
(``runs_app.services.ledger_transition``) that locks the run row first, then the effect: the
step's changes are fenced by its lease, an operator's resolution moves the run in the same
transaction.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.db.models.expressions import Combinable
from django.utils import timezone

from effects_app.models import RESOLUTIONS, EffectRecord
from effects_app.tracing import traced_effect
from openrath_project.errors import Conflict, ValidationFailed
from openrath_project.jsondiff import json_diff
from openrath_project.jsontext import digest
from runs_app import services as run_services
from runs_app.control import LeaseLost, NeedsReview
from runs_app.models import Run, RunFork
from runs_app.step import StepRef
from runs_app.transitions import EFFECT, UNSET, Changes, Unset, is_terminal

logger = logging.getLogger(__name__)


class EffectConflict(Conflict):
    """The key was used before in this step with a different request."""

    code = "effect_conflict"


def _jsonable(value: Any) -> Any:
    """JSON as is; anything else by its ``repr`` (what a reviewer can read)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        if isinstance(value, dict):
            return {str(k): _jsonable(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [_jsonable(v) for v in value]
        return repr(value)


def _callable_name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", "") or ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{name}" if module else str(name)


def request_of(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict:
    return {
        "fn": _callable_name(fn),
        "args": _jsonable(list(args)),
        "kwargs": _jsonable(dict(kwargs)),
    }


def derive_idempotency_key(run_id: Any, step: str, key: str) -> str:
    return hashlib.sha256(f"openrath:{run_id}:{step}:{key}".encode()).hexdigest()


@dataclass(frozen=True)
class EffectChanges(Changes):
    """The columns an effect's transition writes besides its status (unset: left alone)."""

    attempts: int | Combinable | Unset = UNSET
    fencing_token: int | Unset = UNSET
    started_at: datetime | Unset = UNSET
    finished_at: datetime | Unset = UNSET
    result: Any | Unset = UNSET
    error: dict[str, Any] | None | Unset = UNSET
    reason: str | Unset = UNSET
    resolution: str | Unset = UNSET
    resolution_result: Any | Unset = UNSET
    resolved_by: str | Unset = UNSET
    resolved_at: datetime | Unset = UNSET


def _fenced(
    record: EffectRecord, token: int, to: str, sources: list[str], changes: EffectChanges
) -> bool:
    """Move the record from one of ``sources`` to ``to`` if the run still belongs to this
    lease (``running`` under ``token``); ``False``, changing nothing, otherwise."""
    return run_services.ledger_transition(
        machine=EFFECT,
        model=EffectRecord,
        pk=record.id,
        run_id=record.run_id,
        to=to,
        sources=sources,
        token=token,
        changes=changes,
    )


def _accepts_idempotency_key(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "idempotency_key" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


@traced_effect
def effect_call(
    ref: StepRef,
    *,
    key: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    idempotent: bool = False,
) -> Any:
    """Run ``fn`` through the ledger on behalf of the step ``ref`` (see the module docstring).

    ``fn`` receives ``idempotency_key=`` when its signature accepts it, so the system it calls
    can deduplicate a retry.
    """
    kwargs = dict(kwargs or {})
    if not isinstance(key, str) or not key or len(key) > 200:
        raise ValueError("an effect key is a non-empty string of at most 200 characters")
    request = request_of(fn, args, kwargs)
    request_digest = digest(request)
    record, forked = _own_record(ref, key)
    if record is None:
        lineage = None
        if forked:
            lineage = _lineage_decision(
                ref,
                key=key,
                request=request,
                request_digest=request_digest,
                idempotent=idempotent,
                opted_in=bool(getattr(fn, REUSE_IN_FORKS_ATTR, False)),
            )
        try:
            with transaction.atomic():
                record = EffectRecord.objects.create(
                    tenant_id=ref.tenant_id,
                    project_id=ref.project_id,
                    run_id=ref.run_id,
                    step=ref.step,
                    checkpoint_seq=ref.checkpoint_seq,
                    key=key,
                    idempotency_key=derive_idempotency_key(ref.run_id, ref.step, key),
                    effect_class="idempotent" if idempotent else "non_idempotent",
                    request=request,
                    request_digest=request_digest,
                    fencing_token=ref.fencing_token,
                    **(lineage.columns() if lineage is not None else {}),
                )
        except IntegrityError:
            record = EffectRecord.objects.get(run_id=ref.run_id, step=ref.step, key=key)
    if record.request_digest != request_digest:
        raise EffectConflict(
            f"effect {key!r} of step {ref.step!r} was recorded with a different request",
            details={
                "effect": str(record.id),
                "recorded_digest": record.request_digest,
                "digest": request_digest,
            },
        )
    if record.status == "succeeded":
        return record.result
    if record.status == "resolved" and record.resolution in ("applied", "reuse_ancestor"):
        return record.resolution_result
    if record.status == "resolved" and record.resolution == "cancel_run":
        raise LeaseLost()
    if record.status == "needs_review" and record.ancestor_id is not None:
        raise NeedsReview(EFFECT_IN_ANCESTOR, ancestor_review_details(record))
    if record.status == "needs_review":
        raise NeedsReview("an effect needs review", {"effect": str(record.id), "key": key})
    runnable = ["prepared", "failed", "resolved"]
    if record.status == "started" and not effect_takeover(record, ref.fencing_token):
        if record.effect_class == "idempotent":
            raise LeaseLost()  # the lease moved on before the effect could be reset
        raise NeedsReview(TAKEOVER_REVIEW_REASON, takeover_details(record))
    if not effect_mark_started(record, ref.fencing_token, sources=runnable):
        raise LeaseLost()
    call_kwargs = dict(kwargs)
    if _accepts_idempotency_key(fn) and "idempotency_key" not in call_kwargs:
        call_kwargs["idempotency_key"] = record.idempotency_key
    try:
        result = fn(*args, **call_kwargs)
    except Exception as exc:
        effect_mark_finished(
            record,
            ref.fencing_token,
            error={"type": type(exc).__name__, "message": str(exc)[:2000]},
        )
        raise
    if not effect_mark_finished(record, ref.fencing_token, result=result):
        # The lease was lost while fn ran: the effect happened but this worker may not
        # record it. Whoever takes the run over finds it started and decides by its class.
        raise LeaseLost()
    return result


# --- Lineage (forked runs) -----------------------------------------------------------------------

#: The review reason of a fork that reached an effect its ancestor committed after the branch
#: point (the run's ``review_reason`` and the record's ``reason``).
EFFECT_IN_ANCESTOR = "effect_in_ancestor"
#: The attribute :func:`reuse_in_forks` sets on a callable.
REUSE_IN_FORKS_ATTR = "openrath_reuse_in_forks"
#: An ancestor's effect that took place in its timeline (what a fork may reuse or must review).
_COMMITTED_SQL = (
    "(e.status = 'succeeded' OR (e.status = 'resolved' "
    "AND e.resolution IN ('applied', 'reuse_ancestor')))"
)

_EFFECT = EffectRecord._meta.db_table
_FORK = RunFork._meta.db_table

_OWN_SQL = f"""
SELECT e.*, EXISTS (SELECT 1 FROM {_FORK} f WHERE f.child_id = %s) AS lineage_forked
FROM (SELECT 1 AS probe) AS probe
LEFT JOIN {_EFFECT} e ON e.run_id = %s AND e.step = %s AND e.key = %s
"""  # noqa: S608 - table names from model metadata, values are parameters

# The nearest ancestor (any generation) that committed this (step, key), with the branch point
# that applies to it: the smallest checkpoint of the fork edges between it and the run (a fork
# of a fork at an earlier checkpoint shares less of the grandparent's history).
_ANCESTOR_SQL = f"""
WITH RECURSIVE lineage (run_id, branch_point, depth) AS (
    SELECT parent_id, checkpoint_seq, 1 FROM {_FORK} WHERE child_id = %s
    UNION ALL
    SELECT f.parent_id,
           CASE WHEN f.checkpoint_seq < l.branch_point THEN f.checkpoint_seq
                ELSE l.branch_point END,
           l.depth + 1
    FROM {_FORK} f JOIN lineage l ON f.child_id = l.run_id
)
SELECT e.*, l.branch_point AS lineage_branch_point
FROM lineage l JOIN {_EFFECT} e ON e.run_id = l.run_id AND e.step = %s AND e.key = %s
WHERE {_COMMITTED_SQL}
ORDER BY l.depth
LIMIT 1
"""  # noqa: S608 - table names from model metadata, values are parameters


def reuse_in_forks(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark an idempotent effect's callable as safe to *reuse* in a forked run: when an
    ancestor committed the same key with the same request after the branch point, the fork
    returns that result instead of stopping for review (docs/time-travel.md). Returns ``fn``.
    A non-idempotent effect is always reviewed, marked or not."""
    setattr(fn, REUSE_IN_FORKS_ATTR, True)
    return fn


def _run_param(run_id: Any) -> Any:
    return Run._meta.pk.get_db_prep_value(run_id, connection)


def _own_record(ref: StepRef, key: str) -> tuple[EffectRecord | None, bool]:
    """The run's record of ``(step, key)`` and whether the run is a fork: one statement."""
    run = _run_param(ref.run_id)
    row = next(iter(EffectRecord.objects.raw(_OWN_SQL, [run, run, ref.step, key])))
    forked = bool(getattr(row, "lineage_forked", False))
    return (row if row.id is not None else None), forked


@dataclass(frozen=True)
class _Lineage:
    """What a fork records when its ancestor committed the same effect."""

    ancestor: EffectRecord
    status: str
    result: Any = None
    reason: str = ""

    def columns(self) -> dict[str, Any]:
        columns: dict[str, Any] = {
            "ancestor": self.ancestor,
            "status": self.status,
            "reason": self.reason,
        }
        if self.status == "succeeded":
            columns.update(result=self.result, attempts=0, finished_at=timezone.now())
        return columns


def committed_result(record: EffectRecord) -> Any:
    """The result an effect committed in its run (its own, or the one an operator gave)."""
    return record.result if record.status == "succeeded" else record.resolution_result


def _lineage_decision(
    ref: StepRef,
    *,
    key: str,
    request: dict[str, Any],
    request_digest: str,
    idempotent: bool,
    opted_in: bool,
) -> _Lineage | None:
    """The rule for a forked run's first call of ``(step, key)`` (module docstring); ``None``
    when no ancestor committed it. One statement."""
    rows = list(EffectRecord.objects.raw(_ANCESTOR_SQL, [_run_param(ref.run_id), ref.step, key]))
    if not rows:
        return None
    ancestor = rows[0]
    branch_point = int(getattr(ancestor, "lineage_branch_point"))  # noqa: B009 - a SQL column
    seq = ancestor.checkpoint_seq
    if seq is not None and seq < branch_point:
        return _Lineage(
            ancestor,
            "succeeded",
            committed_result(ancestor),
            f"committed by run {ancestor.run_id} before the branch point ({branch_point})",
        )
    # Unknown checkpoint (a row older than the field): treated as after the branch point.
    if idempotent and opted_in and ancestor.request_digest == request_digest:
        return _Lineage(
            ancestor,
            "succeeded",
            committed_result(ancestor),
            f"reused from run {ancestor.run_id} (idempotent, same request, opted in)",
        )
    return _Lineage(ancestor, "needs_review", reason=EFFECT_IN_ANCESTOR)


def ancestor_review_details(record: EffectRecord) -> dict[str, Any]:
    """What an ``effect_in_ancestor`` review shows: both requests, their digests and a diff."""
    ancestor = record.ancestor
    assert ancestor is not None
    return {
        "effect": str(record.id),
        "key": record.key,
        "request": record.request,
        "request_digest": record.request_digest,
        "ancestor": {
            "effect": str(ancestor.id),
            "run": str(ancestor.run_id),
            "checkpoint": ancestor.checkpoint_seq,
            "request": ancestor.request,
            "request_digest": ancestor.request_digest,
            "result": committed_result(ancestor),
        },
        "diff": json_diff(ancestor.request, record.request),
    }


#: Why a run waits for a person after a takeover found a non-idempotent effect started.
TAKEOVER_REVIEW_REASON = "a non-idempotent effect may or may not have happened"


def takeover_details(record: EffectRecord) -> dict[str, Any]:
    return {"effect": str(record.id), "key": record.key, "attempts": record.attempts}


def effect_takeover(record: EffectRecord, token: int) -> bool:
    """The takeover decision on an effect found ``started`` by the lease ``token`` (its
    previous holder died, or gave it up, while the effect ran): ``True`` when it may be called
    again with the same idempotency key (idempotent); ``False`` when it may or may not have
    happened (non-idempotent): the effect is moved to ``needs_review``, fenced by ``token``, and
    the caller parks the run in ``needs_review`` too (``run_services.run_needs_review``). An
    idempotent one goes back to ``prepared`` (recorded, not in flight: OpenRath's "retryable"),
    fenced by ``token``, and is then started again like any prepared effect."""
    if record.effect_class == "idempotent":
        return _fenced(record, token, "prepared", ["started"], EffectChanges())
    _fenced(
        record,
        token,
        "needs_review",
        ["started"],
        EffectChanges(reason="the worker died while the effect was running"),
    )
    return False


def effect_mark_started(
    record: EffectRecord, token: int, *, sources: list[str] | None = None
) -> bool:
    """``-> started`` (an attempt begins), fenced by the lease ``token``; ``False`` when the
    lease or the record moved on."""
    return _fenced(
        record,
        token,
        "started",
        sources or ["prepared"],
        EffectChanges(
            attempts=F("attempts") + 1,
            started_at=timezone.now(),
            fencing_token=token,
            error=None,
        ),
    )


def effect_mark_finished(
    record: EffectRecord, token: int, *, result: Any = None, error: dict[str, Any] | None = None
) -> bool:
    """``started -> succeeded`` (with ``result``) or ``-> failed`` (with ``error``), fenced by
    the lease ``token``."""
    if error is not None:
        changes = EffectChanges(error=error, finished_at=timezone.now())
        return _fenced(record, token, "failed", ["started"], changes)
    changes = EffectChanges(result=_jsonable(result), finished_at=timezone.now())
    return _fenced(record, token, "succeeded", ["started"], changes)


def effect_prepare(
    *,
    run_id: Any,
    step: str,
    key: str,
    effect_class: str,
    request: dict[str, Any],
    request_digest: str,
    token: int,
) -> EffectRecord | None:
    """Record a ``prepared`` effect of a run held under the lease ``token`` (an effect
    recorded by hand, outside a step: OpenRath's ``EffectLedger.prepare``). The run row is
    locked and must still be ``running`` under ``token``: ``None``, recording nothing, when
    it is not. The same ``(run, step, key)`` again returns the recorded row (the caller
    compares its request); ``EffectConflict`` is the caller's to raise."""
    with transaction.atomic():
        run = (
            Run.objects.select_for_update()
            .filter(id=run_id, fencing_token=token, status="running")
            .only("id", "tenant_id", "project_id", "checkpoint_seq")
            .first()
        )
        if run is None:
            return None
        existing = EffectRecord.objects.filter(run_id=run_id, step=step, key=key).first()
        if existing is not None:
            return existing
        return EffectRecord.objects.create(
            tenant_id=run.tenant_id,
            project_id=run.project_id,
            run_id=run.id,
            step=step,
            checkpoint_seq=run.checkpoint_seq,
            key=key,
            idempotency_key=derive_idempotency_key(run.id, step, key),
            effect_class=effect_class,
            request=request,
            request_digest=request_digest,
            fencing_token=token,
        )


#: The answers to a review after a crash, and to an ``effect_in_ancestor`` review.
TAKEOVER_OUTCOMES = ("applied", "not_applied", "cancel_run")
ANCESTOR_OUTCOMES = ("perform_again", "reuse_ancestor", "cancel_run")


def effect_resolve(
    *,
    effect: EffectRecord,
    outcome: str,
    request_digest: str,
    result: Any = None,
    reason: str = "",
    actor: str = "",
    ancestor_digest: str | None = None,
) -> EffectRecord:
    """An operator's answer to a ``needs_review`` effect, bound to the request they saw.

    After a crash: ``applied``: it happened (with ``result``), the run continues without
    calling it again; ``not_applied``: it did not, the run calls it once more; ``cancel_run``:
    cancel the run. For an ``effect_in_ancestor`` review (a fork reached an effect its ancestor
    committed after the branch point), bound to both requests (``ancestor_digest`` is the
    ancestor's): ``perform_again``: the fork calls it (with its own idempotency key);
    ``reuse_ancestor``: the fork continues with the ancestor's result; ``cancel_run``.
    ``needs_review -> resolved`` and the run's move (``needs_review -> queued``, or its
    cancellation) are one transaction, which locks the run, then the effect. 400 for an outcome
    that does not answer this kind of review; 409 ``already_resolved`` when someone answered
    first, ``digest_mismatch`` when a request is not the one the operator saw.
    """
    if outcome not in RESOLUTIONS:
        raise ValidationFailed(
            f"outcome must be one of {', '.join(RESOLUTIONS)}",
            details={"outcome": ["unknown outcome"]},
        )
    with transaction.atomic():
        run = Run.objects.select_for_update().get(id=effect.run_id)
        locked = EffectRecord.objects.select_for_update().get(id=effect.id)
        if locked.status != "needs_review":
            raise _not_in_review(locked)
        ancestor = locked.ancestor if locked.ancestor_id is not None else None
        allowed = ANCESTOR_OUTCOMES if ancestor is not None else TAKEOVER_OUTCOMES
        if outcome not in allowed:
            raise ValidationFailed(
                f"this review is answered with one of {', '.join(allowed)}",
                details={"outcome": [f"one of {', '.join(allowed)}"]},
            )
        if request_digest != locked.request_digest:
            raise Conflict(
                "request_digest does not match the effect's request: reload and review again",
                code="digest_mismatch",
                details={"request_digest": locked.request_digest},
            )
        if ancestor is not None and ancestor_digest != ancestor.request_digest:
            raise Conflict(
                "ancestor_digest does not match the ancestor's request: reload and review again",
                code="digest_mismatch",
                details={"ancestor_digest": ancestor.request_digest},
            )
        if outcome == "reuse_ancestor":
            assert ancestor is not None
            result = committed_result(ancestor)
        move = None
        if outcome != "cancel_run" and run.status == "needs_review":
            move = run_services.RunMove(
                to="queued",
                event="effect.resolved",
                step=locked.step,
                expect=["needs_review"],
                data={
                    "effect": str(locked.id),
                    "outcome": outcome,
                    "by": actor,
                    "request_digest": locked.request_digest,
                    **(
                        {"ancestor": str(ancestor.id), "ancestor_digest": ancestor.request_digest}
                        if ancestor is not None
                        else {}
                    ),
                },
                changes=run_services.RunChanges(review_reason=""),
            )
        moved = run_services.ledger_transition(
            machine=EFFECT,
            model=EffectRecord,
            pk=locked.id,
            run_id=run.id,
            to="resolved",
            sources=["needs_review"],
            changes=EffectChanges(
                resolution=outcome,
                resolution_result=(
                    _jsonable(result) if outcome in ("applied", "reuse_ancestor") else None
                ),
                resolved_by=actor[:200],
                resolved_at=timezone.now(),
                reason=reason[:500],
            ),
            run_move=move,
        )
        locked.refresh_from_db()
        if not moved:  # unreachable under the locks above; a miss must never pass silently
            raise _not_in_review(locked)
        if outcome == "cancel_run" and not is_terminal(run.status):
            run_services.run_cancel(
                run=run, reason=f"effect {locked.key} review: {reason}", actor=actor
            )
    return locked


def _not_in_review(effect: EffectRecord) -> Conflict:
    return Conflict(
        f"the effect is {effect.status}, not waiting for review",
        code="already_resolved" if effect.status == "resolved" else "illegal_transition",
        details={"status": effect.status},
    )


class LedgerDecisions:
    """A :class:`sessions_app.context.DecisionStore` on the ledger: a selector's decision in a
    step is recorded once and reused when the step runs again."""

    def __init__(self, ref: StepRef) -> None:
        self.ref = ref

    def _key(self, key: str) -> str:
        return f"decision@{self.ref.checkpoint_seq}:{key}"[:200]

    def recall(self, key: str) -> Any | None:
        record = EffectRecord.objects.filter(
            run_id=self.ref.run_id, step=self.ref.step, key=self._key(key), status="succeeded"
        ).first()
        return None if record is None else record.result

    def record(self, key: str, value: Any) -> None:
        stored_key = self._key(key)
        request = {"decision": key}
        try:
            with transaction.atomic():
                EffectRecord.objects.create(
                    tenant_id=self.ref.tenant_id,
                    project_id=self.ref.project_id,
                    run_id=self.ref.run_id,
                    step=self.ref.step,
                    checkpoint_seq=self.ref.checkpoint_seq,
                    key=stored_key,
                    idempotency_key=derive_idempotency_key(
                        self.ref.run_id, self.ref.step, stored_key
                    ),
                    effect_class="decision",
                    request=request,
                    request_digest=digest(request),
                    status="succeeded",
                    result=_jsonable(value),
                    attempts=1,
                    fencing_token=self.ref.fencing_token,
                    finished_at=timezone.now(),
                )
        except IntegrityError:
            pass  # recorded by an earlier pass: the first decision stands
