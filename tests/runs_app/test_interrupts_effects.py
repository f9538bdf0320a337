"""Interrupts, the effect ledger and budgets, on one thread (the drills use real processes)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from effects_app.models import EffectRecord
from effects_app.services import effect_resolve
from openrath_project.errors import Conflict, ValidationFailed
from runs_app import reconciler, services
from runs_app.interrupts import interrupt_resolve, interrupts_expire
from runs_app.models import Interrupt, Run, RunEvent
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import durable

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _reset():
    durable.PUBLISHED.clear()
    durable.CRASH["publish"] = False


def _start(registry, project, name, state, **kwargs):
    run, _ = services.run_create(
        project=project, workflow=registry.get(name), state=state, **kwargs
    )
    return run


def _waiting(registry, project, **state):
    run = _start(registry, project, "approval", {"report": "Q3", **state})
    waiting = drive(registry, run.id)
    assert waiting.status == "waiting"
    assert waiting.lease_expires_at is None
    return waiting, Interrupt.objects.get(run=waiting)


def test_approve_with_a_response(registry, project):
    run, interrupt = _waiting(registry, project)
    assert (interrupt.kind, interrupt.title, interrupt.status) == (
        "approval",
        "Publish the report?",
        "pending",
    )
    assert interrupt.request == {"title": "Publish the report?", "report": "Q3"}
    with pytest.raises(ValidationFailed) as bad:
        interrupt_resolve(
            interrupt=interrupt, decision="approve", response={"note": 5}, actor="user:olivia"
        )
    assert "response.note" in bad.value.details
    with pytest.raises(Conflict, match="does not match"):
        interrupt_resolve(
            interrupt=interrupt,
            decision="approve",
            response={"note": "ok"},
            request_digest="0" * 64,
        )
    interrupt_resolve(
        interrupt=interrupt,
        decision="approve",
        response={"note": "ship it"},
        request_digest=interrupt.request_digest,
        actor="user:olivia",
    )
    with pytest.raises(Conflict, match="already resolved"):
        interrupt_resolve(interrupt=interrupt, decision="reject")
    done = drive(registry, run.id)
    assert done.status == "succeeded"
    assert done.output["note"] == "ship it"
    assert done.output["receipt"]["published"] == "Q3"
    assert durable.PUBLISHED == ["Q3"]
    assert durable.CALLS["review"] == 2  # the step ran again and got the decision
    types = list(RunEvent.objects.filter(run=done).order_by("seq").values_list("type", flat=True))
    assert types.count("run.waiting") == 1
    assert "interrupt.resolved" in types
    effect = EffectRecord.objects.get(run=done)
    assert (effect.status, effect.attempts, effect.effect_class) == (
        "succeeded",
        1,
        "non_idempotent",
    )
    assert effect.result == {"published": "Q3", "key": effect.idempotency_key[:8]}


def test_reject_raises_in_the_step(registry, project):
    run, interrupt = _waiting(registry, project)
    interrupt_resolve(interrupt=interrupt, decision="reject", reason="numbers are off")
    done = drive(registry, run.id)
    assert done.output == {"report": "Q3", "approved": False, "reason": "numbers are off"}
    assert durable.PUBLISHED == []


def test_expiry_applies_the_declared_default(registry, project):
    run, interrupt = _waiting(
        registry, project, timeout=60, default={"decision": "approve", "response": {"note": "auto"}}
    )
    assert interrupts_expire(now=timezone.now() + timedelta(minutes=2)) == 1
    interrupt.refresh_from_db()
    assert (interrupt.status, interrupt.decision, interrupt.resolved_by) == (
        "expired",
        "approve",
        "system:expiry",
    )
    done = drive(registry, run.id)
    assert done.output["note"] == "auto"


def test_non_idempotent_effect_after_a_crash_needs_review(registry, project):
    run, interrupt = _waiting(registry, project)
    interrupt_resolve(interrupt=interrupt, decision="approve", response={"note": "go"})
    durable.CRASH["publish"] = True
    with pytest.raises(KeyboardInterrupt):
        drive(registry, run.id)
    assert durable.PUBLISHED == ["Q3"]
    effect = EffectRecord.objects.get(run=run)
    assert effect.status == "started"
    Run.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reconciler.reconcile().expired_leases == 1
    review = drive(registry, run.id)
    assert review.status == "needs_review"
    effect.refresh_from_db()
    assert effect.status == "needs_review"
    assert durable.PUBLISHED == ["Q3"]  # never called again on its own
    # not applied: called exactly once more
    with pytest.raises(Conflict, match="request_digest"):
        effect_resolve(effect=effect, outcome="not_applied", request_digest="f" * 64)
    effect_resolve(
        effect=effect,
        outcome="not_applied",
        request_digest=effect.request_digest,
        reason="checked: nothing published",
        actor="user:olivia",
    )
    done = drive(registry, run.id)
    assert done.status == "succeeded"
    assert durable.PUBLISHED == ["Q3", "Q3"]
    effect.refresh_from_db()
    assert (effect.status, effect.resolution, effect.attempts) == ("succeeded", "not_applied", 2)


def test_applied_resolution_continues_without_calling(registry, project):
    run, interrupt = _waiting(registry, project)
    interrupt_resolve(interrupt=interrupt, decision="approve", response={"note": "go"})
    durable.CRASH["publish"] = True
    with pytest.raises(KeyboardInterrupt):
        drive(registry, run.id)
    Run.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    reconciler.reconcile()
    drive(registry, run.id)
    effect = EffectRecord.objects.get(run=run)
    effect_resolve(
        effect=effect,
        outcome="applied",
        request_digest=effect.request_digest,
        result={"published": "Q3", "by": "hand"},
        actor="user:olivia",
    )
    done = drive(registry, run.id)
    assert done.status == "succeeded"
    assert done.output["receipt"] == {"published": "Q3", "by": "hand"}
    assert durable.PUBLISHED == ["Q3"]


def test_idempotent_effect_is_retried_with_the_same_key(registry, project):
    run, interrupt = _waiting(registry, project, idempotent=True)
    interrupt_resolve(interrupt=interrupt, decision="approve", response={"note": "go"})
    durable.CRASH["publish"] = True
    with pytest.raises(KeyboardInterrupt):
        drive(registry, run.id)
    Run.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    reconciler.reconcile()
    done = drive(registry, run.id)
    assert done.status == "succeeded"
    assert durable.PUBLISHED == ["Q3", "Q3"]
    effect = EffectRecord.objects.get(run=run)
    assert (effect.status, effect.attempts) == ("succeeded", 2)
    assert done.output["receipt"]["key"] == effect.idempotency_key[:8]


def test_cancel_run_resolution(registry, project):
    run, interrupt = _waiting(registry, project)
    interrupt_resolve(interrupt=interrupt, decision="approve", response={"note": "go"})
    durable.CRASH["publish"] = True
    with pytest.raises(KeyboardInterrupt):
        drive(registry, run.id)
    Run.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    reconciler.reconcile()
    drive(registry, run.id)
    effect = EffectRecord.objects.get(run=run)
    effect_resolve(effect=effect, outcome="cancel_run", request_digest=effect.request_digest)
    assert Run.objects.get(id=run.id).status == "cancelled"


def test_budget_breach_pauses_with_an_approval(registry, project):
    run = _start(registry, project, "budgeted", {}, token_budget=1000)
    waiting = drive(registry, run.id)
    assert waiting.status == "waiting"
    interrupt = Interrupt.objects.get(run=waiting)
    assert interrupt.title == "Budget exceeded (run tokens): continue?"
    assert interrupt.request["spent"] == "1100"
    assert "second" not in durable.CALLS
    interrupt_resolve(interrupt=interrupt, decision="approve")
    done = drive(registry, run.id)
    assert done.status == "succeeded"
    assert durable.CALLS["second"] == 1
    assert Run.objects.get(id=run.id).token_budget == 2100
