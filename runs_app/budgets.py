"""Token and cost budgets of runs and sessions, checked at step boundaries and after each model
call. Going over one does not spend silently: it raises an approval interrupt ("budget
exceeded: continue?"); approving grants the same budget again, rejecting fails the step.

* run budgets: ``Run.token_budget`` / ``Run.cost_budget_usd`` (set when the run is created);
  spent = the usage of every chunk the run wrote;
* session budgets: ``session.metadata["budget"] = {"tokens": N, "cost_usd": X}``;
  spent = the working session's usage totals.

A grant (:func:`budget_grant`) applies only while the lease of the step that asked still holds
the run (a worker that lost it raises ``LeaseLost`` and changes nothing), and a session grant
sets its one JSON key in the database instead of rewriting the metadata it read.
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import BigIntegerField, DecimalField, JSONField, Sum
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from runs_app.control import LeaseLost
from runs_app.interrupts import interrupt_request
from runs_app.models import Run
from runs_app.step import StepRef
from sessions_app import services as session_services
from sessions_app.models import Chunk, Session


def run_spent(run_id: Any) -> tuple[int, Decimal]:
    totals = Chunk.objects.filter(run_id=run_id, usage__isnull=False).aggregate(
        tokens=Coalesce(Sum(Cast(KT("usage__total_tokens"), BigIntegerField())), 0),
        cost=Coalesce(
            Sum(Cast(KT("usage__cost_usd"), DecimalField(max_digits=20, decimal_places=8))),
            Decimal(0),
        ),
    )
    return int(totals["tokens"]), Decimal(totals["cost"])


def _over(limit: Any, spent: Any) -> bool:
    return limit is not None and spent >= limit


def budget_check(ref: StepRef) -> None:
    """Interrupt for approval when a budget is exhausted; return otherwise."""
    # Held chunks count: what the step spent so far is written before it is summed.
    session_services.flush_buffer(session_id=ref.session_id)
    run = Run.objects.only("id", "token_budget", "cost_budget_usd", "session_id").get(id=ref.run_id)
    checks: list[tuple[str, str, Any, Any]] = []
    if run.token_budget is not None or run.cost_budget_usd is not None:
        tokens, cost = run_spent(run.id)
        checks += [
            ("run", "tokens", run.token_budget, tokens),
            ("run", "cost_usd", run.cost_budget_usd, cost),
        ]
    session = (
        Session.objects.only("metadata", "usage_total_tokens", "usage_cost_usd")
        .filter(pk=run.session_id or uuid.UUID(int=0))
        .first()
    )
    budget = (session.metadata or {}).get("budget") if session is not None else None
    if isinstance(budget, dict) and session is not None:
        checks += [
            ("session", "tokens", budget.get("tokens"), session.usage_total_tokens),
            ("session", "cost_usd", budget.get("cost_usd"), session.usage_cost_usd),
        ]
    for scope, measure, limit, spent in checks:
        if not _over(limit, spent):
            continue
        request = {
            "question": "budget exceeded: continue?",
            "scope": scope,
            "measure": measure,
            "limit": str(limit),
            "spent": str(spent),
        }
        interrupt_request(
            ref,
            kind="approval",
            request=request,
            timeout_seconds=None,
            schema=None,
            title=f"Budget exceeded ({scope} {measure}): continue?",
            default=None,
            sequence=1,
            step=f"{ref.step}:budget:{scope}:{measure}:{spent}",
        )
        budget_grant(
            run_id=run.id,
            token=ref.fencing_token,
            scope=scope,
            measure=measure,
            amount=_grown(measure, limit, spent),
            session_id=session.id if session is not None else None,
        )


def _grown(measure: str, limit: Any, spent: Any) -> int | Decimal:
    """Approved: the same budget again, on top of what is spent."""
    if measure == "tokens":
        return int(spent) + int(limit)
    return Decimal(str(spent)) + Decimal(str(limit))


def budget_grant(
    *,
    run_id: uuid.UUID,
    token: int,
    scope: str,
    measure: str,
    amount: int | Decimal,
    session_id: uuid.UUID | None,
) -> None:
    """Set a run's (or its session's) ``measure`` budget to ``amount``, while the lease that
    asked still holds the run: one transaction that locks the run row (``running`` under
    ``token``; :class:`LeaseLost` otherwise, changing nothing), then writes the grant.

    A session grant sets the one key ``metadata.budget.<measure>`` inside the database, so a
    concurrent change of another key (the other measure, an API edit of the metadata) is kept.
    """
    if measure not in ("tokens", "cost_usd") or scope not in ("run", "session"):
        raise ValueError(f"no {scope} budget of {measure!r}")
    with transaction.atomic():
        holder = Run.objects.select_for_update().filter(
            id=run_id, fencing_token=token, status="running"
        )
        if not holder.exists():
            raise LeaseLost()
        if scope == "run":
            field = "token_budget" if measure == "tokens" else "cost_budget_usd"
            Run.objects.filter(id=run_id).update(**{field: amount})
        elif session_id is not None:
            stored = int(amount) if measure == "tokens" else float(amount)
            Session.objects.filter(id=session_id).update(metadata=_budget_key_set(measure, stored))


def _budget_key_set(measure: str, value: int | float) -> RawSQL:
    """``metadata`` with ``budget.<measure>`` set to ``value`` (other keys as stored), computed
    by the database from the row it updates (PostgreSQL ``jsonb_set``, SQLite ``json_set``)."""
    if connection.vendor == "postgresql":
        return RawSQL(
            "jsonb_set(metadata, %s::text[], %s::jsonb, true)",
            (["budget", measure], json.dumps(value)),
            output_field=JSONField(),
        )
    return RawSQL(
        "json_set(metadata, %s, json(%s))",
        (f"$.budget.{measure}", json.dumps(value)),
        output_field=JSONField(),
    )
