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
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from effects_app.models import EffectRecord
from openrath_project.errors import Conflict
from openrath_project.jsontext import digest
from runs_app import services as run_services
from runs_app.control import LeaseLost, NeedsReview
from runs_app.models import Run

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


def _fenced(record: EffectRecord, token: int, statuses: list[str], **changes: Any) -> bool:
    """Update the record if it is in ``statuses`` and the run still belongs to this lease."""
    changes.setdefault("updated_at", timezone.now())
    with transaction.atomic():
        alive = (
            Run.objects.select_for_update()
            .filter(id=record.run_id, fencing_token=token, status="running")
            .exists()
        )
        if not alive:
            return False
        updated = EffectRecord.objects.filter(id=record.id, status__in=statuses).update(**changes)
    return bool(updated)


def _accepts_idempotency_key(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "idempotency_key" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def effect_call(
    ctx: Any,
    *,
    key: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    idempotent: bool = False,
) -> Any:
    """Run ``fn`` through the ledger on behalf of a step (see the module docstring).

    ``fn`` receives ``idempotency_key=`` when its signature accepts it, so the system it calls
    can deduplicate a retry.
    """
    kwargs = dict(kwargs or {})
    if not isinstance(key, str) or not key or len(key) > 200:
        raise ValueError("an effect key is a non-empty string of at most 200 characters")
    request = request_of(fn, args, kwargs)
    request_digest = digest(request)
    record = EffectRecord.objects.filter(run_id=ctx.run_id, step=ctx.step, key=key).first()
    if record is None:
        try:
            with transaction.atomic():
                record = EffectRecord.objects.create(
                    tenant_id=ctx.tenant_id,
                    project_id=ctx.project.id,
                    run_id=ctx.run_id,
                    step=ctx.step,
                    key=key,
                    idempotency_key=derive_idempotency_key(ctx.run_id, ctx.step, key),
                    effect_class="idempotent" if idempotent else "non_idempotent",
                    request=request,
                    request_digest=request_digest,
                    fencing_token=ctx.fencing_token,
                )
        except IntegrityError:
            record = EffectRecord.objects.get(run_id=ctx.run_id, step=ctx.step, key=key)
    if record.request_digest != request_digest:
        raise EffectConflict(
            f"effect {key!r} of step {ctx.step!r} was recorded with a different request",
            details={
                "effect": str(record.id),
                "recorded_digest": record.request_digest,
                "digest": request_digest,
            },
        )
    if record.status == "succeeded":
        return record.result
    if record.status == "resolved" and record.resolution == "applied":
        return record.resolution_result
    if record.status == "resolved" and record.resolution == "cancel_run":
        raise LeaseLost()
    if record.status == "needs_review":
        raise NeedsReview("an effect needs review", {"effect": str(record.id), "key": key})
    runnable = ["prepared", "failed", "resolved"]
    if record.status == "started":
        if record.effect_class != "idempotent":
            _fenced(
                record,
                ctx.fencing_token,
                ["started"],
                status="needs_review",
                reason="the worker died while the effect was running",
            )
            raise NeedsReview(
                "a non-idempotent effect may or may not have happened",
                {"effect": str(record.id), "key": key, "attempts": record.attempts},
            )
        runnable.append("started")  # idempotent: call again with the same key
    if not _fenced(
        record,
        ctx.fencing_token,
        runnable,
        status="started",
        attempts=record.attempts + 1,
        started_at=timezone.now(),
        fencing_token=ctx.fencing_token,
        error=None,
    ):
        raise LeaseLost()
    call_kwargs = dict(kwargs)
    if _accepts_idempotency_key(fn) and "idempotency_key" not in call_kwargs:
        call_kwargs["idempotency_key"] = record.idempotency_key
    try:
        result = fn(*args, **call_kwargs)
    except Exception as exc:
        _fenced(
            record,
            ctx.fencing_token,
            ["started"],
            status="failed",
            error={"type": type(exc).__name__, "message": str(exc)[:2000]},
            finished_at=timezone.now(),
        )
        raise
    stored = _jsonable(result)
    if not _fenced(
        record,
        ctx.fencing_token,
        ["started"],
        status="succeeded",
        result=stored,
        finished_at=timezone.now(),
    ):
        # The lease was lost while fn ran: the effect happened but this worker may not
        # record it. Whoever takes the run over finds it started and decides by its class.
        raise LeaseLost()
    return result


def effect_resolve(
    *,
    effect: EffectRecord,
    outcome: str,
    request_digest: str,
    result: Any = None,
    reason: str = "",
    actor: str = "",
) -> EffectRecord:
    """An operator's answer to a ``needs_review`` effect, bound to the request they saw.

    ``applied``: it happened (with ``result``), the run continues without calling it again;
    ``not_applied``: it did not, the run calls it once more; ``cancel_run``: cancel the run.
    """
    with transaction.atomic():
        locked = EffectRecord.objects.select_for_update().get(id=effect.id)
        if locked.status != "needs_review":
            raise Conflict(
                f"the effect is {locked.status}, not waiting for review",
                code="already_resolved" if locked.status == "resolved" else "illegal_transition",
                details={"status": locked.status},
            )
        if request_digest != locked.request_digest:
            raise Conflict(
                "request_digest does not match the effect's request: reload and review again",
                code="digest_mismatch",
                details={"request_digest": locked.request_digest},
            )
        locked.status = "resolved"
        locked.resolution = outcome
        locked.resolution_result = _jsonable(result) if outcome == "applied" else None
        locked.resolved_by = actor[:200]
        locked.resolved_at = timezone.now()
        locked.reason = reason[:500]
        locked.save()
        run = Run.objects.get(id=locked.run_id)
        if outcome == "cancel_run":
            if run.status not in ("succeeded", "failed", "cancelled", "timed_out"):
                run_services.run_cancel(
                    run=run, reason=f"effect {locked.key} review: {reason}", actor=actor
                )
        elif run.status == "needs_review":
            run_services.run_transition(
                run_id=run.id,
                to="queued",
                event="effect.resolved",
                step=locked.step,
                expect=["needs_review"],
                data={
                    "effect": str(locked.id),
                    "outcome": outcome,
                    "by": actor,
                    "request_digest": locked.request_digest,
                },
                changes={"review_reason": ""},
            )
    return locked


class LedgerDecisions:
    """A :class:`sessions_app.context.DecisionStore` on the ledger: a selector's decision in a
    step is recorded once and reused when the step runs again."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def _key(self, key: str) -> str:
        return f"decision@{self.ctx.checkpoint_seq}:{key}"[:200]

    def recall(self, key: str) -> Any | None:
        record = EffectRecord.objects.filter(
            run_id=self.ctx.run_id, step=self.ctx.step, key=self._key(key), status="succeeded"
        ).first()
        return None if record is None else record.result

    def record(self, key: str, value: Any) -> None:
        stored_key = self._key(key)
        request = {"decision": key}
        try:
            with transaction.atomic():
                EffectRecord.objects.create(
                    tenant_id=self.ctx.tenant_id,
                    project_id=self.ctx.project.id,
                    run_id=self.ctx.run_id,
                    step=self.ctx.step,
                    key=stored_key,
                    idempotency_key=derive_idempotency_key(
                        self.ctx.run_id, self.ctx.step, stored_key
                    ),
                    effect_class="decision",
                    request=request,
                    request_digest=digest(request),
                    status="succeeded",
                    result=_jsonable(value),
                    attempts=1,
                    fencing_token=self.ctx.fencing_token,
                    finished_at=timezone.now(),
                )
        except IntegrityError:
            pass  # recorded by an earlier pass: the first decision stands
