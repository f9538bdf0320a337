"""Interrupt and effect transitions through the one compare-and-set, the run-first lock order,
lease-fenced budget grants and run transitions that write only the columns they change."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from effects_app.models import EffectRecord
from effects_app.services import EffectChanges, derive_idempotency_key, effect_resolve
from openrath_project.errors import Conflict, IllegalTransition
from runs_app import reconciler, services
from runs_app.budgets import budget_grant
from runs_app.control import LeaseLost
from runs_app.interrupts import InterruptChanges, interrupt_resolve, interrupts_expire
from runs_app.models import INTERRUPT_STATES, Interrupt, Run, RunEvent
from runs_app.transitions import EFFECT, INTERRUPT, RUN, Changes
from sessions_app.models import Session
from tests.runs_app.conftest import drive
from tests.support import error_of, require_postgres

pytestmark = pytest.mark.django_db(transaction=True)


# --- helpers ------------------------------------------------------------------------------------


def _check_values(model, name):
    constraint = next(c for c in model._meta.constraints if c.name == name)
    assert constraint.condition == Q(status__in=constraint.condition.children[0][1])
    return set(constraint.condition.children[0][1])


def _waiting(registry, project):
    run, _ = services.run_create(
        project=project, workflow=registry.get("approval"), state={"report": "Q3"}
    )
    waiting = drive(registry, run.id)
    assert waiting.status == "waiting"
    return waiting, Interrupt.objects.get(run=waiting)


def _claimed(registry, project, name="linear", **kwargs):
    run, _ = services.run_create(project=project, workflow=registry.get(name), **kwargs)
    claim = services.lease_claim(worker="w1", run_id=run.id)
    assert claim is not None
    return Run.objects.get(id=run.id), claim


def _lease_moved(run, claim):
    """Expire ``claim``'s lease, let the reconciler requeue the run, and claim it again."""
    Run.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reconciler.reconcile().expired_leases == 1
    again = services.lease_claim(worker="w2", run_id=run.id)
    assert again is not None
    assert again.token > claim.token
    return again


def _effect(run, *, status, key="publish"):
    return EffectRecord.objects.create(
        tenant_id=run.tenant_id,
        project_id=run.project_id,
        run=run,
        step="publish",
        key=key,
        idempotency_key=derive_idempotency_key(run.id, "publish", key),
        effect_class="non_idempotent",
        request={"fn": "tests.publish", "args": ["Q3"], "kwargs": {}},
        request_digest="a" * 64,
        status=status,
        attempts=1,
    )


def _in_review(registry, project):
    """A run stopped in needs_review over a non-idempotent effect that may have happened."""
    run, claim = _claimed(registry, project)
    effect = _effect(run, status="needs_review")
    services.run_needs_review(
        run_id=run.id, token=claim.token, reason="an effect needs review", data={}
    )
    return Run.objects.get(id=run.id), effect


def _snapshot(row):
    row.refresh_from_db()
    return {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields}


def _events(run):
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def _race_after_commit(first, second):
    """``first`` runs in a thread and holds its transaction open for a moment after it is done;
    ``second`` starts meanwhile, so it has to wait for ``first``'s locks and then see its
    committed outcome. Returns (first's result, second's error)."""
    done = threading.Event()
    outcome: dict[str, object] = {}

    def hold() -> None:
        try:
            with transaction.atomic():
                outcome["first"] = first()
                done.set()
                time.sleep(0.4)
                # The locks are held until the commit just after this line: the second call
                # cannot return before it (a time taken after the commit could race it).
                outcome["committing_at"] = time.monotonic()
        except BaseException as exc:
            outcome["first_error"] = exc
            done.set()
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert done.wait(30)
    with pytest.raises(Conflict) as second_error:
        second()
    returned_at = time.monotonic()
    thread.join(30)
    assert "first_error" not in outcome, outcome.get("first_error")
    assert returned_at >= outcome["committing_at"]  # it waited for the first to commit
    return outcome["first"], second_error.value


# --- the tables match the models ------------------------------------------------------------------


def test_every_model_status_is_in_its_table_and_back():
    run_choices = {value for value, _ in Run._meta.get_field("status").choices}
    assert run_choices == set(RUN.statuses) == _check_values(Run, "run_status_valid")
    effect_choices = {value for value, _ in EffectRecord._meta.get_field("status").choices}
    assert (
        effect_choices == set(EFFECT.statuses) == _check_values(EffectRecord, "effect_status_valid")
    )
    # Interrupt.status has no choices: the constraint is its list.
    assert set(INTERRUPT_STATES) == set(INTERRUPT.statuses)
    assert _check_values(Interrupt, "interrupt_status_valid") == set(INTERRUPT.statuses)
    # Rows are born where the tables say.
    assert Run._meta.get_field("status").default in RUN.initial
    assert Interrupt._meta.get_field("status").default in INTERRUPT.initial
    assert EffectRecord._meta.get_field("status").default in EFFECT.initial


# --- illegal interrupt and effect transitions change nothing ----------------------------------


def test_an_illegal_interrupt_transition_is_refused_and_changes_nothing(registry, project):
    run, interrupt = _waiting(registry, project)
    interrupt_resolve(interrupt=interrupt, decision="approve", response={"note": "go"})
    before, events = _snapshot(interrupt), _events(run)
    changes = InterruptChanges(decision="reject", reason="too late")
    # resolved -> expired is not in the table: a caller naming that source is refused outright
    with pytest.raises(IllegalTransition) as refused:
        services.ledger_transition(
            machine=INTERRUPT,
            model=Interrupt,
            pk=interrupt.id,
            run_id=run.id,
            to="expired",
            sources=["resolved"],
            changes=changes,
        )
    assert refused.value.details == {"from": "resolved", "to": "expired"}
    # by default the sources are the table's (pending only): the compare-and-set misses
    assert not services.ledger_transition(
        machine=INTERRUPT,
        model=Interrupt,
        pk=interrupt.id,
        run_id=run.id,
        to="expired",
        changes=changes,
    )
    # the services say the same as 409s
    with pytest.raises(Conflict) as again:
        interrupt_resolve(interrupt=interrupt, decision="reject")
    assert (again.value.code, again.value.details["status"]) == ("already_resolved", "resolved")
    assert interrupts_expire(now=timezone.now() + timedelta(days=1)) == 0
    assert _snapshot(interrupt) == before
    assert _events(run) == events


def test_an_expired_interrupt_cannot_be_resolved(registry, project):
    run, interrupt = _waiting(registry, project)
    Interrupt.objects.filter(id=interrupt.id).update(expires_at=timezone.now())
    # no default declared: the run ends timed_out with the expiry, in the same transaction
    assert interrupts_expire(now=timezone.now() + timedelta(seconds=1)) == 1
    before = _snapshot(interrupt)
    assert (before["status"], before["decision"], before["resolved_by"]) == (
        "expired",
        "reject",
        "system:expiry",
    )
    assert Run.objects.get(id=run.id).status == "timed_out"
    with pytest.raises(Conflict) as late:
        interrupt_resolve(interrupt=interrupt, decision="approve", response={"note": "go"})
    assert (late.value.code, late.value.details) == (
        "already_resolved",
        {"status": "expired", "decision": "reject"},
    )
    assert _snapshot(interrupt) == before
    assert Run.objects.get(id=run.id).status == "timed_out"


def test_an_illegal_effect_transition_is_refused_and_changes_nothing(registry, project):
    run, claim = _claimed(registry, project)
    effect = _effect(run, status="succeeded")
    before, events = _snapshot(effect), _events(run)
    # succeeded is terminal: not even the running lease may start it again
    assert not services.ledger_transition(
        machine=EFFECT,
        model=EffectRecord,
        pk=effect.id,
        run_id=run.id,
        to="started",
        token=claim.token,
        changes=EffectChanges(attempts=2),
    )
    with pytest.raises(IllegalTransition):
        services.ledger_transition(
            machine=EFFECT,
            model=EffectRecord,
            pk=effect.id,
            run_id=run.id,
            to="started",
            sources=["succeeded"],
            token=claim.token,
            changes=EffectChanges(attempts=2),
        )
    with pytest.raises(Conflict) as review:
        effect_resolve(effect=effect, outcome="applied", request_digest=effect.request_digest)
    assert (review.value.code, review.value.details) == (
        "illegal_transition",
        {"status": "succeeded"},
    )
    assert _snapshot(effect) == before
    assert _events(run) == events


@dataclass(frozen=True)
class _WithStatus(Changes):
    status: str = "succeeded"


def test_a_status_among_the_changes_is_a_programming_error(registry, project):
    run, _ = _claimed(registry, project)
    effect = _effect(run, status="started")
    with pytest.raises(TypeError, match="`to`"):
        services.ledger_transition(
            machine=EFFECT,
            model=EffectRecord,
            pk=effect.id,
            run_id=run.id,
            to="failed",
            changes=_WithStatus(),
        )
    assert EffectRecord.objects.get(id=effect.id).status == "started"


def test_the_effect_fence_refuses_a_worker_whose_lease_moved(registry, project):
    run, claim = _claimed(registry, project)
    effect = _effect(run, status="started")
    again = _lease_moved(run, claim)
    before = _snapshot(effect)
    late = EffectChanges(result={"ok": True}, finished_at=timezone.now())
    with CaptureQueriesContext(connection) as fencing:
        assert not services.ledger_transition(
            machine=EFFECT,
            model=EffectRecord,
            pk=effect.id,
            run_id=run.id,
            to="succeeded",
            sources=["started"],
            token=claim.token,
            changes=late,
        )
    # the fence is the run's row lock; the effect is not even read
    assert _touches(fencing.captured_queries) == [
        ("runs_app_run", "lock" if connection.features.has_select_for_update else "read")
    ]
    assert not [q for q in fencing.captured_queries if q["sql"].startswith(("UPDATE", "INSERT"))]
    assert _snapshot(effect) == before
    # the current holder may
    assert services.ledger_transition(
        machine=EFFECT,
        model=EffectRecord,
        pk=effect.id,
        run_id=run.id,
        to="succeeded",
        sources=["started"],
        token=again.token,
        changes=late,
    )
    effect.refresh_from_db()
    assert (effect.status, effect.result) == ("succeeded", {"ok": True})
    assert effect.updated_at > before["updated_at"]


# --- one wins, the other gets already_resolved ------------------------------------------------


def test_two_resolutions_of_one_interrupt_one_wins(registry, project):
    require_postgres()
    run, interrupt = _waiting(registry, project)
    stale = Interrupt.objects.get(id=interrupt.id)  # both read it pending
    winner, loser = _race_after_commit(
        lambda: interrupt_resolve(
            interrupt=interrupt, decision="approve", response={"note": "a"}, actor="user:a"
        ),
        lambda: interrupt_resolve(interrupt=stale, decision="reject", actor="user:b"),
    )
    assert (loser.code, loser.details) == (
        "already_resolved",
        {"status": "resolved", "decision": "approve"},
    )
    interrupt.refresh_from_db()
    assert (interrupt.status, interrupt.decision, interrupt.resolved_by) == (
        "resolved",
        "approve",
        "user:a",
    )
    assert (winner.status, winner.decision) == ("resolved", "approve")
    assert _events(run).count("interrupt.resolved") == 1
    assert Run.objects.get(id=run.id).status == "queued"


def test_two_resolutions_over_the_api_one_wins(registry, project, make_token, client_for):
    # The API's resolve reads the interrupt and locks its run in one statement, in the
    # transaction of the decision: the second request waits for the first's commit and then
    # sees it decided.
    require_postgres()
    run, interrupt = _waiting(registry, project)
    client = client_for(make_token(["interrupts:read", "interrupts:resolve"]))
    url = f"/api/v1/interrupts/{interrupt.id}/resolve/"

    def post(decision, **body):
        answer = client.post(
            url,
            {"decision": decision, "request_digest": interrupt.request_digest, **body},
            format="json",
        )
        if answer.status_code != 200:
            error = error_of(answer)
            raise Conflict(error["message"], code=error["code"], details=error["details"])
        return answer.json()

    winner, loser = _race_after_commit(
        lambda: post("approve", response={"note": "a"}), lambda: post("reject")
    )
    assert winner["status"] == "resolved"
    assert (loser.code, loser.details) == (
        "already_resolved",
        {"status": "resolved", "decision": "approve"},
    )
    assert _events(run).count("interrupt.resolved") == 1
    assert Run.objects.get(id=run.id).status == "queued"


def test_a_stale_read_of_an_interrupt_decided_while_its_run_waits_again_is_refused(
    registry, project
):
    # The resolve trusts the caller's read except for its status, which the compare-and-set
    # checks: here the run waits again (as it would on its next interrupt) after another
    # decision, so the run's status alone would let the stale read through.
    run, interrupt = _waiting(registry, project)
    stale = Interrupt.objects.get(id=interrupt.id)
    interrupt_resolve(interrupt=interrupt, decision="approve", response={"note": "a"})
    Run.objects.filter(id=run.id).update(status="waiting")
    events, before = _events(run), _snapshot(interrupt)
    with pytest.raises(Conflict) as refused:
        interrupt_resolve(interrupt=stale, decision="reject", actor="user:b")
    assert (refused.value.code, refused.value.details) == (
        "already_resolved",
        {"status": "resolved", "decision": "approve"},
    )
    assert (_events(run), _snapshot(interrupt)) == (events, before)
    assert Run.objects.get(id=run.id).status == "waiting"


def test_two_resolutions_of_one_effect_one_wins(registry, project):
    require_postgres()
    run, effect = _in_review(registry, project)
    winner, loser = _race_after_commit(
        lambda: effect_resolve(
            effect=effect, outcome="not_applied", request_digest="a" * 64, actor="user:a"
        ),
        lambda: effect_resolve(
            effect=effect, outcome="cancel_run", request_digest="a" * 64, actor="user:b"
        ),
    )
    assert (loser.code, loser.details) == ("already_resolved", {"status": "resolved"})
    effect.refresh_from_db()
    assert (effect.status, effect.resolution, effect.resolved_by) == (
        "resolved",
        "not_applied",
        "user:a",
    )
    assert winner.resolution == "not_applied"
    run.refresh_from_db()
    assert (run.status, run.review_reason) == ("queued", "")  # not cancelled by the loser
    assert _events(run).count("effect.resolved") == 1


def test_the_compare_and_set_moves_a_row_once(registry, project):
    """The second of two resolutions that both saw the row pending changes nothing, even
    where there are no row locks to order them (SQLite)."""
    run, interrupt = _waiting(registry, project)
    decide = InterruptChanges(decision="approve", resolved_by="user:a", resolved_at=timezone.now())
    kwargs = {
        "machine": INTERRUPT,
        "model": Interrupt,
        "pk": interrupt.id,
        "run_id": run.id,
        "to": "resolved",
        "sources": ["pending"],
    }
    assert services.ledger_transition(**kwargs, changes=decide)
    after_first = _snapshot(interrupt)
    assert not services.ledger_transition(
        **kwargs, changes=InterruptChanges(decision="reject", resolved_by="user:b")
    )
    assert _snapshot(interrupt) == after_first
    assert after_first["resolved_by"] == "user:a"


# --- the lock order: the run first, then its interrupt or effect ------------------------------


def _touches(queries):
    """(table, how) for each statement on a run, interrupt or effect row, in order: ``lock``
    (SELECT ... FOR UPDATE), ``read`` (a plain SELECT) or ``write`` (an UPDATE, which locks)."""
    tables = {"runs_app_run", "runs_app_interrupt", "effects_app_effectrecord"}
    touched = []
    for query in queries:
        sql = query["sql"]
        found = re.match(r'UPDATE "(\w+)"', sql) or (
            re.search(r'FROM "(\w+)"', sql) if sql.startswith("SELECT") else None
        )
        if found and found.group(1) in tables:
            how = "write" if sql.startswith("UPDATE") else "read"
            if how == "read" and "FOR UPDATE" in sql:
                how = "lock"
            touched.append((found.group(1), how))
    return touched


def test_resolutions_lock_the_run_before_the_interrupt_or_effect(registry, project):
    run, interrupt = _waiting(registry, project)
    with CaptureQueriesContext(connection) as resolving:
        interrupt_resolve(interrupt=interrupt, decision="approve", response={"note": "go"})
    review_run, effect = _in_review(registry, project)
    with CaptureQueriesContext(connection) as reviewing:
        effect_resolve(effect=effect, outcome="not_applied", request_digest="a" * 64)
    locks = connection.features.has_select_for_update
    for captured, child in (
        (resolving, "runs_app_interrupt"),
        (reviewing, "effects_app_effectrecord"),
    ):
        touched = _touches(captured.captured_queries)
        # the run's row is the first one locked; the child's is next, by a lock or its UPDATE
        assert touched[0] == ("runs_app_run", "lock" if locks else "read")
        first_child = next(how for table, how in touched if table == child)
        assert first_child in ({"lock", "write"} if locks else {"read", "write"})


# --- budget grants are fenced by the lease that asked ------------------------------------------


def test_a_budget_grant_after_the_lease_moved_changes_nothing(registry, project):
    run, claim = _claimed(registry, project, token_budget=1000)
    session = Session.objects.get(id=run.session_id)
    Session.objects.filter(id=session.id).update(
        metadata={"budget": {"tokens": 50, "cost_usd": 0.5}, "owner": "olivia"}
    )
    again = _lease_moved(run, claim)
    run_before, session_before = _snapshot(run), _snapshot(session)
    for scope, measure, amount in (
        ("run", "tokens", 2100),
        ("run", "cost_usd", Decimal("3.5")),
        ("session", "tokens", 150),
    ):
        with pytest.raises(LeaseLost):
            budget_grant(
                run_id=run.id,
                token=claim.token,
                scope=scope,
                measure=measure,
                amount=amount,
                session_id=session.id,
            )
    assert _snapshot(run) == run_before
    assert _snapshot(session) == session_before
    # the lease that holds the run now may grant
    budget_grant(
        run_id=run.id,
        token=again.token,
        scope="run",
        measure="tokens",
        amount=2100,
        session_id=None,
    )
    assert Run.objects.get(id=run.id).token_budget == 2100


def test_a_session_grant_sets_one_key_and_keeps_what_changed_meanwhile(registry, project):
    run, claim = _claimed(registry, project)
    session = Session.objects.get(id=run.session_id)
    Session.objects.filter(id=session.id).update(
        metadata={"budget": {"tokens": 50, "cost_usd": 0.5}, "owner": "olivia"}
    )
    # what budget_check read is now stale: someone edits the metadata, another grant lands
    Session.objects.filter(id=session.id).update(
        metadata={"budget": {"tokens": 50, "cost_usd": 0.75}, "owner": "olivia", "tag": "q3"}
    )
    budget_grant(
        run_id=run.id,
        token=claim.token,
        scope="session",
        measure="tokens",
        amount=170,
        session_id=session.id,
    )
    budget_grant(
        run_id=run.id,
        token=claim.token,
        scope="session",
        measure="cost_usd",
        amount=Decimal("1.25"),
        session_id=session.id,
    )
    session.refresh_from_db()
    assert session.metadata == {
        "budget": {"tokens": 170, "cost_usd": 1.25},
        "owner": "olivia",
        "tag": "q3",
    }


# --- run_transition writes only the columns it changes ------------------------------------------


def _update_columns(queries):
    # the run's UPDATE, alone or (PostgreSQL) after its event's INSERT in one statement
    updates = [q["sql"] for q in queries if 'UPDATE "runs_app_run" SET ' in q["sql"]]
    assert len(updates) == 1, updates
    set_clause = updates[0].split('UPDATE "runs_app_run" SET ', 1)[1].split(" WHERE ", 1)[0]
    return set(re.findall(r'"(\w+)" = ', set_clause))


def test_run_transition_writes_only_the_changed_columns(registry, project):
    run, claim = _claimed(registry, project)
    wake = timezone.now() + timedelta(minutes=5)
    # a column no transition names, changed by someone else after the run was read
    Run.objects.filter(id=run.id).update(priority=7)
    with CaptureQueriesContext(connection) as retry:
        services.run_transition(
            run_id=run.id,
            to="queued",
            event="step.retry_scheduled",
            token=claim.token,
            changes=services.RunChanges(attempt=2, wake_at=wake),
        )
    assert _update_columns(retry.captured_queries) == {
        "status",
        "attempt",
        "wake_at",
        "lease_owner",
        "lease_expires_at",
        "event_seq",
        "updated_at",
    }
    retried = Run.objects.get(id=run.id)
    assert (retried.status, retried.attempt, retried.wake_at, retried.priority) == (
        "queued",
        2,
        wake,
        7,
    )
    assert retried.lease_expires_at is None
    error = {"type": "Operator", "message": "stopped"}
    with CaptureQueriesContext(connection) as failing:
        services.run_transition(
            run_id=run.id,
            to="failed",
            event="run.failed",
            expect=["queued"],
            changes=services.RunChanges(error=error),
        )
    assert _update_columns(failing.captured_queries) == {
        "status",
        "error",
        "lease_owner",
        "lease_expires_at",
        "finished_at",
        "wake_at",
        "event_seq",
        "updated_at",
    }
    failed = Run.objects.get(id=run.id)
    assert (failed.status, failed.error, failed.attempt, failed.wake_at) == (
        "failed",
        error,
        2,
        None,
    )
    assert failed.finished_at is not None
    assert _events(run)[-2:] == ["step.retry_scheduled", "run.failed"]
