"""Cheap starts (issue 20, item 5): one transaction to create a run, one to claim it.

On PostgreSQL ``run_create`` writes the working session, the run and its ``run.created`` event
with one composed statement after the tenant's queue lock, and the claim statement returns the
run, project and session rows the executor used to read. These tests check that the composed
rows are the rows the ORM path writes and reads, that the queue cap holds under concurrent
submissions, and that a stale plan cache cannot lose a run.
"""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.forms.models import model_to_dict

from openrath_project.errors import RateLimited
from runs_app import services
from runs_app.executor import execute_claim, run_one
from runs_app.models import Run, RunEvent, WorkflowPlan
from runs_app.services import composed
from runs_app.services import runs as runs_module
from sessions_app.models import Session
from tests.support import require_postgres

#: Columns that differ between two runs by construction (ids, times, the run's own name).
VOLATILE = {"id", "created_at", "updated_at", "trace_context", "session_id"}


def _row(obj: Any, skip: set[str]) -> dict[str, Any]:
    fields = type(obj)._meta.concrete_fields
    return {f.attname: getattr(obj, f.attname) for f in fields if f.attname not in skip}


def _session_row(session: Session) -> dict[str, Any]:
    return {
        f.attname: getattr(session, f.attname)
        for f in Session._meta.concrete_fields
        if f.attname not in {"id", "created_at", "updated_at", "run_id", "metadata"}
    }


@pytest.mark.django_db
def test_the_composed_start_writes_the_rows_the_orm_path_writes(project, registry, monkeypatch):
    require_postgres()
    workflow = registry.get("linear")
    composed_run, created = services.run_create(
        project=project,
        workflow=workflow,
        state={"n": 1},
        priority=3,
        created_by="alice",
        token_budget=50,
        cost_budget_usd=Decimal("1.25"),
    )
    assert created
    monkeypatch.setattr(composed, "composed_sql", lambda: False)
    orm_run, _ = services.run_create(
        project=project,
        workflow=workflow,
        state={"n": 1},
        priority=3,
        created_by="alice",
        token_budget=50,
        cost_budget_usd=Decimal("1.25"),
    )
    stored = {run.id: Run.objects.get(id=run.id) for run in (composed_run, orm_run)}
    assert _row(stored[composed_run.id], VOLATILE) == _row(stored[orm_run.id], VOLATILE)
    # The returned instance is the stored row (not a copy that differs from it).
    assert _row(composed_run, {"trace_context"}) == _row(stored[composed_run.id], {"trace_context"})
    assert not composed_run._state.adding
    sessions = {run_id: Session.objects.get(id=run.session_id) for run_id, run in stored.items()}
    assert _session_row(sessions[composed_run.id]) == _session_row(sessions[orm_run.id])
    for run_id, session in sessions.items():
        assert session.metadata == {"run": str(run_id)}
        assert session.run_id == run_id
    events = {
        run_id: list(RunEvent.objects.filter(run_id=run_id).values("seq", "type", "step", "data"))
        for run_id in stored
    }
    for run_id, rows in events.items():
        assert rows == [
            {
                "seq": 1,
                "type": "run.created",
                "step": "",
                "data": {
                    "workflow": "linear",
                    "plan": workflow.plan.hash,
                    "session": str(stored[run_id].session_id),
                },
            }
        ]


@pytest.mark.django_db
def test_the_claim_returns_the_run_project_and_session_the_orm_reads(project, registry):
    require_postgres()
    run, _ = services.run_create(project=project, workflow=registry.get("linear"), state={"n": 2})
    claim = services.lease_claim(worker="w-cheap", run_id=run.id)
    assert claim is not None
    assert claim.run is not None
    assert claim.session is not None
    stored = Run.objects.select_related("project").get(id=run.id)
    for field in Run._meta.concrete_fields:
        assert getattr(claim.run, field.attname) == getattr(stored, field.attname), field.name
    assert model_to_dict(claim.run.project) == model_to_dict(stored.project)
    session = Session.objects.get(id=run.session_id)
    for field in Session._meta.concrete_fields:
        assert getattr(claim.session, field.attname) == getattr(session, field.attname), field.name
    assert claim.session.writer_run_id == run.id
    assert claim.session.writer_token == claim.token
    assert not claim.run._state.adding
    assert claim.run._state.db == "default"
    # The executor runs the claim with these rows and reads neither again.
    reads: list[str] = []

    def record(execute, sql, params, many, context):
        reads.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        outcome = execute_claim(claim, registry=registry)
    assert outcome.status == "succeeded"
    assert not [sql for sql in reads if 'FROM "runs_app_run"' in sql and "SELECT" in sql[:10]]
    assert not [sql for sql in reads if 'FROM "sessions_app_session"' in sql]


@pytest.mark.django_db(transaction=True)
def test_a_start_is_one_orm_statement_and_a_claim_none(project, registry):
    """Round trips through Django's cursor: creating a run takes the queue lock (the rest is
    the composed statement, which bypasses Django's cursor); claiming and running a one-step
    run reads nothing through the ORM."""
    require_postgres()
    workflow = registry.get("linear")
    services.run_create(project=project, workflow=workflow, state={})  # stores the plan
    while run_one("warm", registry=registry) is not None:
        pass
    statements: list[str] = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        services.run_create(project=project, workflow=workflow, state={})
    assert len(statements) == 1, statements
    assert "pg_advisory_xact_lock" in statements[0]
    statements.clear()
    claim = services.lease_claim(worker="w-one")
    assert claim is not None
    with connection.execute_wrapper(record):
        outcome = execute_claim(claim, registry=registry)
    assert outcome.status == "succeeded"
    reads = [sql for sql in statements if sql.lstrip().upper().startswith("SELECT")]
    assert not reads, reads


@pytest.mark.django_db
def test_a_stale_plan_cache_stores_the_plan_and_the_run(project, registry):
    require_postgres()
    workflow = registry.get("routed")
    assert not WorkflowPlan.objects.filter(hash=workflow.plan.hash).exists()
    # This process believes the plan stored (as after a rolled-back transaction stored it).
    runs_module._stored_plans[f"{connection.alias}:{workflow.plan.hash}"] = workflow.plan.hash
    run, created = services.run_create(project=project, workflow=workflow, state={})
    assert created
    assert WorkflowPlan.objects.filter(hash=workflow.plan.hash).exists()
    assert Run.objects.get(id=run.id).plan_id == workflow.plan.hash


@pytest.mark.django_db
def test_the_cap_refuses_with_the_count_and_leaves_nothing(project, registry, settings):
    require_postgres()
    settings.OPENRATH_MAX_QUEUED_RUNS_PER_TENANT = 2
    workflow = registry.get("linear")
    for _ in range(2):
        services.run_create(project=project, workflow=workflow, state={})
    sessions = Session.objects.count()
    with pytest.raises(RateLimited) as refused:
        services.run_create(project=project, workflow=workflow, state={})
    assert refused.value.details == {"queued": 2, "limit": 2}
    assert Run.objects.count() == 2
    assert Session.objects.count() == sessions
    # A claimed run no longer counts: the next submission is queued.
    assert services.lease_claim(worker="w") is not None
    services.run_create(project=project, workflow=workflow, state={})
    assert Run.objects.filter(status="queued").count() == 2


SUBMITTERS = 12


def submit_at_once(submitters: int, submit: Any) -> list[str]:
    """``submitters`` threads, released together, each calling ``submit(index, attempt)`` twice
    (the late ones meet a full queue); every outcome, ``"queued"`` or ``"refused"`` (a 429).
    Any other error fails the test."""
    barrier = threading.Barrier(submitters)
    outcomes: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=60)
            for attempt in range(2):
                try:
                    submit(index, attempt)
                    result = "queued"
                except RateLimited:
                    result = "refused"
                with lock:
                    outcomes.append(result)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(submitters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return outcomes


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("already_queued", [0, 3])
def test_concurrent_submissions_at_the_cap_never_exceed_it(
    project, registry, settings, already_queued
):
    """Twelve threads submit at once against a cap of 5: exactly the free places are queued,
    every other submission is refused with a 429, whatever the interleaving."""
    require_postgres()
    settings.OPENRATH_MAX_QUEUED_RUNS_PER_TENANT = 5
    workflow = registry.get("linear")
    for _ in range(already_queued):
        services.run_create(project=project, workflow=workflow, state={})
    outcomes = submit_at_once(
        SUBMITTERS,
        lambda index, attempt: services.run_create(
            project=project, workflow=workflow, state={"i": index, "a": attempt}
        ),
    )
    assert len(outcomes) == 2 * SUBMITTERS
    assert outcomes.count("queued") == 5 - already_queued
    assert Run.objects.filter(tenant_id=project.tenant_id, status="queued").count() == 5
    # Refused submissions left no working session behind.
    assert Session.objects.filter(project=project).count() == 5
