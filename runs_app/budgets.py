"""Token and cost budgets of runs and sessions, checked at step boundaries and after each model
call. Going over one does not spend silently: it raises an approval interrupt ("budget
exceeded: continue?"); approving grants the same budget again, rejecting fails the step.

* run budgets: ``Run.token_budget`` / ``Run.cost_budget_usd`` (set when the run is created);
  spent = the usage of every chunk the run wrote;
* session budgets: ``session.metadata["budget"] = {"tokens": N, "cost_usd": X}``;
  spent = the working session's usage totals.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from django.db.models import BigIntegerField, DecimalField, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from runs_app.models import Run
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


def budget_check(ctx: Any) -> None:
    """Interrupt for approval when a budget is exhausted; return otherwise."""
    from runs_app.interrupts import interrupt_request

    # Held chunks count: what the step spent so far is written before it is summed.
    session_services.flush_buffer(session_id=ctx.session.id)
    run = Run.objects.only("id", "token_budget", "cost_budget_usd", "session_id").get(id=ctx.run_id)
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
            ctx,
            kind="approval",
            request=request,
            timeout_seconds=None,
            schema=None,
            title=f"Budget exceeded ({scope} {measure}): continue?",
            default=None,
            sequence=1,
            step=f"{ctx.step}:budget:{scope}:{measure}:{spent}",
        )
        _grant_more(run, scope, measure, limit, spent, session)


def _grant_more(
    run: Run, scope: str, measure: str, limit: Any, spent: Any, session: Session | None
) -> None:
    """Approved: the same budget again, on top of what is spent."""
    if scope == "run":
        field = "token_budget" if measure == "tokens" else "cost_budget_usd"
        Run.objects.filter(id=run.id).update(**{field: spent + limit})
    elif session is not None:
        metadata = dict(session.metadata)
        metadata["budget"] = {
            **metadata.get("budget", {}),
            measure: float(spent) + float(limit)
            if measure == "cost_usd"
            else int(spent) + int(limit),
        }
        Session.objects.filter(id=session.id).update(metadata=metadata)
