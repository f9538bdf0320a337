"""Starts that write a working session first (a fork of the session submitted on, or a new
session with the first message): the queue cap, counted in the statement that inserts the run
on PostgreSQL after the tenant's lock, refuses with nothing left behind and holds under
concurrent submissions; a plan this process believed stored but is not is stored and the start
goes through. Portable ones run on SQLite too."""

from __future__ import annotations

import pytest
from django.db import transaction

from openrath_project.errors import RateLimited
from runs_app import services
from runs_app.models import Run, RunEvent, WorkflowPlan
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import LineageEdge, Session
from tests.runs_app.test_cheap_starts import submit_at_once
from tests.support import require_postgres


def _conversation(project, text: str = "hello") -> Session:
    return session_services.session_create(
        project=project, title="chat", chunks=[make_draft(role="user", content={"text": text})]
    )


@pytest.mark.django_db
def test_a_fork_start_at_the_cap_is_refused_with_the_count_and_leaves_nothing(
    project, registry, settings
):
    settings.OPENRATH_MAX_QUEUED_RUNS_PER_TENANT = 2
    workflow = registry.get("linear")
    for _ in range(2):
        services.run_create(project=project, workflow=workflow, state={})
    conversation = _conversation(project)
    counts = (Session.objects.count(), LineageEdge.objects.count(), RunEvent.objects.count())
    with pytest.raises(RateLimited) as refused:
        services.run_create(project=project, workflow=workflow, session=conversation)
    assert refused.value.details == {"queued": 2, "limit": 2}
    with pytest.raises(RateLimited):
        services.run_create(project=project, workflow=workflow, user_message="hi")
    assert Run.objects.count() == 2
    after = (Session.objects.count(), LineageEdge.objects.count(), RunEvent.objects.count())
    assert after == counts  # neither the fork nor the new session survived the refusal


@pytest.mark.django_db
def test_a_fork_start_writes_the_run_its_event_and_the_fork(project, registry):
    conversation = _conversation(project)
    run, created = services.run_create(
        project=project, workflow=registry.get("linear"), session=conversation
    )
    assert created
    stored = Run.objects.get(id=run.id)
    assert stored.status == "queued"
    assert stored.input_session_id == conversation.id
    assert stored.origin_session_id == conversation.id
    assert stored.origin_len == 1
    assert stored.input_policy == "reject"
    edge = LineageEdge.objects.get(child_id=stored.session_id)
    assert (edge.parent_id, edge.op, edge.parent_len) == (conversation.id, "fork", 1)
    assert list(RunEvent.objects.filter(run_id=run.id).values_list("seq", "type", "data")) == [
        (
            1,
            "run.created",
            {
                "workflow": "linear",
                "plan": registry.get("linear").plan.hash,
                "session": str(stored.session_id),
            },
        )
    ]
    assert not run._state.adding


@pytest.mark.django_db
def test_a_plan_stored_in_a_rolled_back_transaction_is_stored_again(project, registry):
    """The process remembers the plan as stored, but the transaction that stored it rolled
    back: the start's insert finds no plan row, stores it and goes through."""
    workflow = registry.get("linear")
    conversation = _conversation(project)
    WorkflowPlan.objects.filter(hash=workflow.plan.hash).delete()

    def start_then_fail() -> None:
        with transaction.atomic():
            services.run_create(project=project, workflow=workflow, session=conversation)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        start_then_fail()
    assert not WorkflowPlan.objects.filter(hash=workflow.plan.hash).exists()
    run, created = services.run_create(
        project=project, workflow=workflow, session=_conversation(project, "again")
    )
    assert created
    assert WorkflowPlan.objects.filter(hash=workflow.plan.hash).exists()
    assert Run.objects.get(id=run.id).plan_id == workflow.plan.hash


SUBMITTERS = 10


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_fork_starts_at_the_cap_never_exceed_it(project, registry, settings):
    """Ten threads each submit on conversations of their own (two each, one a fork, one a first
    message) against a cap of 4: exactly 4 are queued, the rest refused with 429, and a refused
    start leaves no working session."""
    require_postgres()
    settings.OPENRATH_MAX_QUEUED_RUNS_PER_TENANT = 4
    workflow = registry.get("linear")
    conversations = [_conversation(project, f"c{i}") for i in range(SUBMITTERS)]
    sessions_before = Session.objects.count()

    def submit(index: int, attempt: int) -> None:
        if attempt == 0:
            services.run_create(project=project, workflow=workflow, session=conversations[index])
        else:
            services.run_create(project=project, workflow=workflow, user_message=f"m{index}")

    outcomes = submit_at_once(SUBMITTERS, submit)
    assert len(outcomes) == 2 * SUBMITTERS
    assert outcomes.count("queued") == 4
    assert Run.objects.filter(status="queued").count() == 4
    # Each queued run wrote one working session; no refused start left one.
    assert Session.objects.count() == sessions_before + 4


@pytest.mark.django_db
def test_a_busy_session_is_refused_as_busy_also_when_the_queue_is_full(project, registry, settings):
    # The same answer on both profiles: the session is decided before the tenant's cap.
    workflow = registry.get("linear")
    conversation = _conversation(project)
    services.run_create(project=project, workflow=workflow, session=conversation)
    settings.OPENRATH_MAX_QUEUED_RUNS_PER_TENANT = 1
    with pytest.raises(session_services.SessionBusy):
        services.run_create(
            project=project, workflow=workflow, session=conversation, input_policy="reject"
        )
    with pytest.raises(RateLimited):  # another session: the cap
        services.run_create(project=project, workflow=workflow, session=_conversation(project))
    assert Run.objects.count() == 1
