"""Concurrent input on one session (issue 23 item 4): reject, enqueue, interrupt, rollback.

Each policy is checked with the exact event sequence of every run involved, the rows it leaves
(working sessions, lineage, the waiting run's hold) and, through the API, the error body and
audit rows. Runs on both profiles: SQLite (the embedded profile) and PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import close_old_connections, connection
from django.utils import timezone

from openrath_project import flow
from openrath_project.errors import ValidationFailed
from openrath_project.tenancy.models import AuditEvent
from runs_app import registration, services
from runs_app.executor import STOP_POLL_SECONDS, execute_claim, run_one
from runs_app.models import Run, RunEvent
from runs_app.reconciler import reconcile
from runs_app.registry import RegistryError, WorkflowRegistry
from runs_app.services.runs import HELD_UNTIL
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import LineageEdge, Session
from sessions_app.selectors import chunk_all
from tests.runs_app.conftest import drive
from tests.support import error_of

pytestmark = pytest.mark.django_db(transaction=True)


class Chat(flow.Workflow):
    """Two checkpointed steps, each appending what it heard."""

    name = "chat"

    @flow.step(entry=True, successors=("reply",), effects="none")
    def hear(self, state, ctx):
        ctx.session.append(f"heard {state['msg']}", role="assistant")
        return {**state, "heard": True}

    @flow.step(effects="none")
    def reply(self, state, ctx):
        ctx.session.append(f"reply {state['msg']}", role="assistant")
        return {**state, "replied": True}


class Patient(flow.Workflow):
    """A long first step that returns as soon as the run is asked to stop."""

    name = "patient"

    @flow.step(entry=True, successors=("later",), effects="none")
    def listen(self, state, ctx):
        ctx.session.append(f"listening {state['msg']}", role="assistant")
        give_up = time.monotonic() + 120  # bounds a broken test only
        while not ctx.stop_requested and time.monotonic() < give_up:
            time.sleep(0.02)
        return {**state, "stopped_early": ctx.stop_requested}

    @flow.step(effects="none")
    def later(self, state, ctx):
        ctx.session.append("later", role="assistant")
        return {**state, "later": True}


class Waiter(flow.Workflow):
    """Its one step returns once a run waits for this one (and the watchdog had a poll's
    time to see it, so the ending commit releases that run in its own transaction; were the
    poll late, the release right after the commit gives the same rows)."""

    name = "waiter"

    @flow.step(entry=True, effects="none")
    def wait(self, state, ctx):
        ctx.session.append(f"waiting {state['msg']}", role="assistant")
        give_up = time.monotonic() + 120
        while not Run.objects.filter(after_run_id=ctx.run_id).exists():
            assert time.monotonic() < give_up, "no run was enqueued"
            time.sleep(0.02)
        time.sleep(STOP_POLL_SECONDS * 2)
        return state


class Napper(flow.Workflow):
    """A chat whose first attempt of its first step sleeps (a worker is killed there)."""

    name = "napper"

    @flow.step(entry=True, successors=("reply",), effects="none")
    def nap(self, state, ctx):
        ctx.session.append(f"nap {state['msg']}", role="assistant")
        if ctx.attempt == 1:
            time.sleep(state.get("seconds", 0))
        return {**state, "napped": True}

    @flow.step(effects="none")
    def reply(self, state, ctx):
        ctx.session.append(f"reply {state['msg']}", role="assistant")
        return {**state, "replied": True}


class Ask(flow.Workflow):
    """Waits for a person's approval (the run is ``waiting``)."""

    name = "ask"

    @flow.step(entry=True, effects="none")
    def approve(self, state, ctx):
        ctx.interrupt("approval", {"title": "go on?"})
        return state


class Queueing(Chat):
    """A workflow whose declared default policy is ``enqueue``."""

    name = "queueing"
    input_policy = "enqueue"


@pytest.fixture
def registry(monkeypatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    for workflow in (Chat, Patient, Waiter, Napper, Ask, Queueing):
        fresh.register(workflow)
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    return fresh


@pytest.fixture
def conversation(project) -> Session:
    """A stored session with the user's first message."""
    return session_services.session_create(
        project=project,
        title="support chat",
        chunks=[make_draft(role="user", content={"text": "hello"})],
    )


def _submit(registry, project, session, msg, *, workflow="chat", policy=None):
    run, created = services.run_create(
        project=project,
        workflow=registry.get(workflow),
        state={"msg": msg},
        session=session,
        input_policy=policy,
    )
    assert created
    return run


def _types(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def _texts(run: Run) -> list[str]:
    run.refresh_from_db()
    return [c.content.get("text", "") for c in chunk_all(run.session_id, upto=run.session_len)]


def _event(run: Run, type_: str) -> dict:
    return RunEvent.objects.get(run=run, type=type_).data


#: The events of a chat run from its claim to its end (two checkpointed steps).
CHAT_TAIL = ["run.claimed", "step.completed", "step.completed", "run.succeeded"]


def _claim_one_step(registry, run: Run) -> None:
    """Claim ``run`` and execute one step: it stays ``running`` under a lease no worker
    renews (as when its worker was killed after that checkpoint)."""
    claim = services.lease_claim(worker="doomed-worker", run_id=run.id)
    assert claim is not None
    assert execute_claim(claim, registry=registry, max_steps=1).status == "running"


def _expire_leases() -> None:
    reconcile(now=timezone.now() + timedelta(hours=1))


# --- reject -----------------------------------------------------------------------------------


def test_reject_is_the_default_and_changes_nothing(registry, project, conversation):
    first = _submit(registry, project, conversation, "a")
    before = (Run.objects.count(), Session.objects.count(), RunEvent.objects.count())
    with pytest.raises(session_services.SessionBusy) as busy:
        _submit(registry, project, conversation, "b")
    assert busy.value.code == "session_busy"
    assert busy.value.details == {
        "session": str(conversation.id),
        "run": str(first.id),
        "status": "queued",
        "active_runs": [str(first.id)],
    }
    assert (Run.objects.count(), Session.objects.count(), RunEvent.objects.count()) == before
    # Submitting on the active run's working session is refused too.
    first.refresh_from_db()
    with pytest.raises(session_services.SessionBusy):
        _submit(registry, project, first.session, "c", policy="reject")
    # Once it ended, the session takes new input again.
    assert drive(registry, first.id).status == "succeeded"
    second = _submit(registry, project, conversation, "d")
    assert second.after_run_id is None
    assert second.input_policy == "reject"


def test_an_unknown_policy_is_a_validation_error(registry, project, conversation):
    with pytest.raises(ValidationFailed) as bad:
        _submit(registry, project, conversation, "a", policy="queue-it")
    assert bad.value.details == {
        "input_policy": ["not one of reject, enqueue, interrupt, rollback"]
    }
    assert Run.objects.count() == 0


def test_two_submissions_at_once_make_one_active_run(registry, project, conversation):
    """Two concurrent submissions on an idle session: one is accepted, the other refused."""
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def submit(msg: str) -> None:
        try:
            barrier.wait(timeout=30)
            _submit(registry, project, conversation, msg)
            outcomes.append("accepted")
        except session_services.SessionBusy:
            outcomes.append("busy")
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=submit, args=(m,)) for m in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["accepted", "busy"]
    assert Run.objects.filter(input_session=conversation).count() == 1


# --- enqueue ----------------------------------------------------------------------------------


def test_enqueue_forms_a_chain_started_in_order(registry, project, conversation):
    first = _submit(registry, project, conversation, "a")
    second = _submit(registry, project, conversation, "b", policy="enqueue")
    third = _submit(registry, project, conversation, "c", policy="enqueue")
    for waiting, after in ((second, first), (third, second)):
        waiting.refresh_from_db()
        assert (waiting.status, waiting.after_run_id, waiting.session_id) == (
            "queued",
            after.id,
            None,
        )
        assert waiting.wake_at == HELD_UNTIL
    assert _event(third, "run.enqueued") == {
        "after_run": str(second.id),
        "policy": "enqueue",
        "position": 2,
    }
    # Workers claim nothing but the head while it runs.
    assert drive(registry, first.id).status == "succeeded"
    second.refresh_from_db()
    assert second.session_id is not None
    assert second.wake_at is None
    third.refresh_from_db()
    assert third.session_id is None  # still waiting: its predecessor has not ended
    assert drive(registry, second.id).status == "succeeded"
    assert drive(registry, third.id).status == "succeeded"

    assert _types(first) == ["run.created", *CHAT_TAIL]
    for run in (second, third):
        assert _types(run) == ["run.created", "run.enqueued", "run.released", *CHAT_TAIL]
    first.refresh_from_db()
    second.refresh_from_db()
    third.refresh_from_db()
    assert first.finished_at <= second.started_at
    assert second.finished_at <= third.started_at
    # Each starts from the conversation as the previous run left it.
    released = _event(third, "run.released")
    assert released == {
        "after_run": str(second.id),
        "after_status": "succeeded",
        "session": str(third.session_id),
        "from": {"session": str(second.session_id), "length": 5},
    }
    assert _texts(third) == [
        "hello",
        "heard a",
        "reply a",
        "heard b",
        "reply b",
        "heard c",
        "reply c",
    ]
    edge = LineageEdge.objects.get(child_id=third.session_id)
    assert (edge.parent_id, edge.parent_len, edge.op) == (second.session_id, 5, "fork")


def test_enqueue_while_the_head_runs_starts_it_when_the_head_succeeds(
    registry, project, conversation
):
    first = _submit(registry, project, conversation, "a", workflow="waiter")
    worker = threading.Thread(target=lambda: (run_one("w1", registry=registry), connection.close()))
    worker.start()
    give_up = time.monotonic() + 60
    while not RunEvent.objects.filter(run=first, type="run.claimed").exists():
        assert time.monotonic() < give_up, "the worker never claimed the run"
        time.sleep(0.02)
    second = _submit(registry, project, conversation, "b", policy="enqueue")
    worker.join(timeout=120)
    assert not worker.is_alive()
    assert _types(first) == ["run.created", "run.claimed", "step.completed", "run.succeeded"]
    assert _types(second) == ["run.created", "run.enqueued", "run.released"]
    assert drive(registry, second.id).status == "succeeded"
    assert _texts(second) == ["hello", "waiting a", "heard b", "reply b"]


def test_the_workflow_default_policy_applies(registry, project, conversation):
    first = _submit(registry, project, conversation, "a", workflow="queueing")
    second = _submit(registry, project, conversation, "b", workflow="queueing")
    second.refresh_from_db()
    assert (second.input_policy, second.after_run_id) == ("enqueue", first.id)
    # An explicit policy wins over the workflow's.
    with pytest.raises(session_services.SessionBusy):
        _submit(registry, project, conversation, "c", workflow="queueing", policy="reject")


def test_a_bad_registered_default_is_refused():
    with pytest.raises(RegistryError, match="input_policy must be one of"):
        WorkflowRegistry().register(Chat, input_policy="later")
    entry = WorkflowRegistry().register(Chat, input_policy="interrupt")
    assert entry.input_policy == "interrupt"


# --- interrupt --------------------------------------------------------------------------------


def test_interrupt_stops_the_running_run_at_its_next_step_boundary(registry, project, conversation):
    first = _submit(registry, project, conversation, "a", workflow="patient")
    worker = threading.Thread(target=lambda: (run_one("w1", registry=registry), connection.close()))
    worker.start()
    give_up = time.monotonic() + 60
    while not RunEvent.objects.filter(run=first, type="run.claimed").exists():
        assert time.monotonic() < give_up, "the worker never claimed the run"
        time.sleep(0.02)
    second = _submit(registry, project, conversation, "b", policy="interrupt")
    worker.join(timeout=120)
    assert not worker.is_alive()

    first.refresh_from_db()
    assert (first.status, first.superseded_by_id) == ("cancelled", second.id)
    assert _types(first) == [
        "run.created",
        "run.claimed",
        "run.interrupt_requested",
        "step.completed",
        "run.interrupted",
    ]
    assert _event(first, "run.interrupted") == {
        "reason": f"interrupted by run {second.id}",
        "by_run": str(second.id),
        "checkpoint": 1,
    }
    assert first.checkpoint_seq == 1
    assert first.state["stopped_early"] is True
    assert drive(registry, second.id).status == "succeeded"
    assert _types(second) == ["run.created", "run.enqueued", "run.released", *CHAT_TAIL]
    # The new run continues from where the interrupted one stopped (its first step's chunk).
    assert _texts(second) == ["hello", "listening a", "heard b", "reply b"]


def test_interrupt_of_a_waiting_run_ends_it_at_once(registry, project, conversation):
    first = _submit(registry, project, conversation, "a", workflow="ask")
    assert drive(registry, first.id).status == "waiting"
    second = _submit(registry, project, conversation, "b", policy="interrupt")
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == "cancelled"
    assert _types(first)[-2:] == ["run.interrupt_requested", "run.interrupted"]
    assert _types(second) == ["run.created", "run.enqueued", "run.released"]
    assert second.session_id is not None
    assert second.wake_at is None
    assert drive(registry, second.id).status == "succeeded"


def test_interrupt_survives_the_worker_dying(registry, project, conversation):
    """The interrupted run's worker is gone (its lease expires): the reconciler's requeue is
    its boundary, and the waiting run is released in that transaction."""
    first = _submit(registry, project, conversation, "a")
    _claim_one_step(registry, first)
    second = _submit(registry, project, conversation, "b", policy="interrupt")
    second.refresh_from_db()
    assert second.session_id is None  # waits: the run it interrupts is still running
    _expire_leases()
    first.refresh_from_db()
    assert first.status == "cancelled"
    assert _types(first) == [
        "run.created",
        "run.claimed",
        "step.completed",
        "run.interrupt_requested",
        "lease.expired",
        "run.interrupted",
    ]
    assert drive(registry, second.id).status == "succeeded"
    assert _texts(second) == ["hello", "heard a", "heard b", "reply b"]


def test_interrupt_cancels_runs_still_waiting_in_the_chain(registry, project, conversation):
    first = _submit(registry, project, conversation, "a")
    queued = _submit(registry, project, conversation, "b", policy="enqueue")
    third = _submit(registry, project, conversation, "c", policy="interrupt")
    queued.refresh_from_db()
    assert (queued.status, queued.superseded_by_id) == ("cancelled", third.id)
    assert _types(queued) == ["run.created", "run.enqueued", "run.cancelled"]
    assert _event(queued, "run.cancelled")["reason"] == f"superseded by run {third.id}"
    # The head was only queued (not executing): it ends at once and the new run starts.
    first.refresh_from_db()
    assert first.status == "cancelled"
    assert _types(first) == ["run.created", "run.interrupt_requested", "run.interrupted"]
    assert _types(third) == ["run.created", "run.enqueued", "run.released"]
    assert _event(third, "run.released")["after_run"] == str(first.id)


# --- rollback ---------------------------------------------------------------------------------


def test_rollback_cancels_the_run_and_starts_from_before_it(registry, project, conversation):
    first = _submit(registry, project, conversation, "a")
    _claim_one_step(registry, first)  # one step done: "heard a" is in its working session
    first.refresh_from_db()
    abandoned = first.session_id
    second = _submit(registry, project, conversation, "b", policy="rollback")
    first.refresh_from_db()
    assert (first.status, first.superseded_by_id) == ("cancelled", second.id)
    assert _types(first) == ["run.created", "run.claimed", "step.completed", "run.rolled_back"]
    assert _event(first, "run.rolled_back") == {
        "reason": f"rolled back by run {second.id}",
        "by_run": str(second.id),
        "by": "",
    }
    assert _types(second) == ["run.created", "run.rollback"]
    assert _event(second, "run.rollback") == {
        "rolled_back": [str(first.id)],
        "from": {"session": str(conversation.id), "length": 1},
    }
    assert drive(registry, second.id).status == "succeeded"
    assert _texts(second) == ["hello", "heard b", "reply b"]
    # The abandoned branch stays in lineage beside the new one.
    assert [c.content["text"] for c in chunk_all(abandoned)] == ["hello", "heard a"]
    second.refresh_from_db()
    edges = LineageEdge.objects.filter(
        parent=conversation, child_id__in=[abandoned, second.session_id]
    )
    assert {(e.child_id, e.parent_len) for e in edges} == {(abandoned, 1), (second.session_id, 1)}
    # The cancelled worker's next commit is refused (its lease is gone).
    assert Run.objects.get(id=first.id).lease_owner == ""


def test_rollback_on_a_runs_own_working_session(registry, project):
    """A run started from a user message works on a new session; a second message on that
    session with rollback starts again from the first message alone."""
    first, _ = services.run_create(
        project=project, workflow=registry.get("chat"), state={"msg": "a"}, user_message="hi"
    )
    _claim_one_step(registry, first)
    first.refresh_from_db()
    working = Session.objects.get(id=first.session_id)
    second = _submit(registry, project, working, "b", policy="rollback")
    first.refresh_from_db()
    assert first.status == "cancelled"
    assert _event(second, "run.rollback")["from"] == {"session": str(working.id), "length": 1}
    assert drive(registry, second.id).status == "succeeded"
    assert _texts(second) == ["hi", "heard b", "reply b"]


# --- a missed release --------------------------------------------------------------------------


def test_the_reconciler_releases_a_run_whose_predecessor_ended_without_releasing_it(
    registry, project, conversation
):
    """The crash window: the predecessor's end committed, the release did not (here its row is
    ended by hand, as a process killed between two transactions would leave it)."""
    first = _submit(registry, project, conversation, "a")
    second = _submit(registry, project, conversation, "b", policy="enqueue")
    first.refresh_from_db()
    Run.objects.filter(id=first.id).update(status="failed", finished_at=timezone.now())
    result = reconcile()
    assert result.inputs_repaired == 1
    second.refresh_from_db()
    assert second.session_id is not None
    assert second.wake_at is None
    assert _event(second, "run.released")["after_status"] == "failed"
    assert reconcile().inputs_repaired == 0  # safe to run again
    assert drive(registry, second.id).status == "succeeded"
    assert _types(second) == ["run.created", "run.enqueued", "run.released", *CHAT_TAIL]
    assert _texts(second) == ["hello", "heard b", "reply b"]


def test_the_reconciler_ends_a_run_asked_to_stop_that_no_longer_executes(
    registry, project, conversation
):
    """A stop request recorded on a run that then stopped executing without honouring it
    (set by hand here, as a process dying between the two would leave it)."""
    first = _submit(registry, project, conversation, "a", workflow="ask")
    assert drive(registry, first.id).status == "waiting"
    Run.objects.filter(id=first.id).update(stop_requested_at=timezone.now())
    assert reconcile().inputs_repaired == 1
    first.refresh_from_db()
    assert first.status == "cancelled"
    assert _types(first)[-1] == "run.interrupted"
    assert reconcile().inputs_repaired == 0


def test_cancelling_the_head_releases_the_next(registry, project, conversation):
    first = _submit(registry, project, conversation, "a")
    second = _submit(registry, project, conversation, "b", policy="enqueue")
    services.run_cancel(run=first, reason="changed my mind", actor="user:ann")
    second.refresh_from_db()
    assert _types(second) == ["run.created", "run.enqueued", "run.released"]
    assert _event(second, "run.released")["after_status"] == "cancelled"


# --- the API ------------------------------------------------------------------------------------


def _post(client, session, msg, policy=None, workflow="chat"):
    body = {
        "workflow": workflow,
        "project": "research",
        "state": {"msg": msg},
        "session": str(session.id),
    }
    if policy is not None:
        body["input_policy"] = policy
    return client.post("/api/v1/runs/", body, format="json")


def test_api_policies_errors_and_audit(
    registry, project, conversation, make_token, client_for, foreign_project
):
    client = client_for(make_token())
    first = _post(client, conversation, "a")
    assert first.status_code == 201, first.json()
    assert first.json()["input_policy"] == "reject"
    assert first.json()["input_session"] == str(conversation.id)

    busy = _post(client, conversation, "b")
    assert busy.status_code == 409
    error = error_of(busy)
    assert error["code"] == "session_busy"
    assert error["details"]["run"] == first.json()["id"]

    bad = _post(client, conversation, "b", policy="sometimes")
    assert bad.status_code == 400
    assert "input_policy" in error_of(bad)["details"]
    assert Run.objects.count() == 1

    queued = _post(client, conversation, "b", policy="enqueue")
    assert queued.status_code == 201
    body = queued.json()
    assert (body["status"], body["after_run"], body["session"]) == (
        "queued",
        first.json()["id"],
        None,
    )

    interrupting = _post(client, conversation, "c", policy="interrupt")
    assert interrupting.status_code == 201
    new_id = interrupting.json()["id"]
    rows = AuditEvent.objects.filter(object_type="run", details__by_run=new_id).order_by("id")
    assert [(r.action, r.object_id) for r in rows] == [
        ("run.interrupt", first.json()["id"]),
        ("run.supersede", body["id"]),
    ]
    create_row = AuditEvent.objects.get(action="run.create", object_id=new_id)
    assert create_row.details["input_policy"] == "interrupt"
    assert create_row.details["after_run"] == first.json()["id"]

    # Another tenant's session is a 404, and nothing is created.
    foreign = session_services.session_create(project=foreign_project, title="theirs")
    before = Run.objects.count()
    missing = _post(client, foreign, "x", policy="enqueue")
    assert missing.status_code == 404
    assert error_of(missing)["code"] == "not_found"
    assert Run.objects.count() == before


# --- the console ------------------------------------------------------------------------------


def test_the_console_run_page_says_what_a_run_waits_for_and_who_stopped_it(
    registry, project, conversation, tenant
):
    from django.test import Client

    from tests.factories import MembershipFactory, UserFactory

    user = UserFactory(username="viewer-acme")
    user.save()
    MembershipFactory(user=user, tenant=tenant, role="viewer")
    client = Client()
    client.force_login(user)
    first = _submit(registry, project, conversation, "a")
    second = _submit(registry, project, conversation, "b", policy="enqueue")
    page = client.get(f"/console/runs/{second.id}/").content.decode()
    assert "waiting for" in page
    assert str(first.id) in page
    third = _submit(registry, project, conversation, "c", policy="interrupt")
    first_page = client.get(f"/console/runs/{first.id}/").content.decode()
    assert "interrupted by" in first_page
    assert str(third.id) in first_page
    second_page = client.get(f"/console/runs/{second.id}/").content.decode()
    assert "superseded by" in second_page
    assert str(third.id) in second_page


# --- the in-process API ---------------------------------------------------------------------


def test_local_runtime_submit_takes_a_policy(tenant, project, conversation):
    from openrath_project.context import RunContext
    from openrath_project.runtime import LocalRuntime
    from openrath_project.security import Principal, PrincipalKind, SecurityContext

    context = RunContext(
        security=SecurityContext(
            principal=Principal(id="alice", kind=PrincipalKind.USER), tenant_id=tenant.slug
        ),
        project=project.slug,
    )
    runtime = LocalRuntime()
    runtime.register(Chat)
    first = runtime.submit(Chat, session_id=conversation.id, context=context, state={"msg": "a"})
    with pytest.raises(session_services.SessionBusy):
        runtime.submit(Chat, session_id=conversation.id, context=context, state={"msg": "b"})
    second = runtime.submit(
        Chat,
        session_id=conversation.id,
        context=context,
        state={"msg": "b"},
        input_policy="enqueue",
    )
    row = Run.objects.get(id=second.id)
    assert (row.input_policy, row.after_run_id, row.session_id) == ("enqueue", first.id, None)


# --- a worker process killed with -9 (PostgreSQL, the database-claiming worker) ------------------


@pytest.fixture
def worker_processes(transactional_db, tmp_path):
    from tests.drills.conftest import Processes
    from tests.support import require_postgres

    require_postgres()
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()
        for process in procs.started:
            log = getattr(process, "log_path", None)
            if log and log.exists():
                print(f"--- {log.name} ---\n{log.read_text()[-4000:]}")


def _wait(predicate, what: str, timeout: float = 120) -> None:
    give_up = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < give_up, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize("policy", ["enqueue", "interrupt"])
def test_a_worker_killed_mid_step_still_hands_the_session_on(
    policy, worker_processes, registry, project, conversation
):
    """kill -9 of the worker executing the active run: another worker takes it over (enqueue:
    it finishes, then the waiting run starts; interrupt: the takeover is its boundary)."""
    import signal

    modules = {"OPENRATH_WORKFLOW_MODULES": __name__}
    first = _submit(registry, project, conversation, "a", workflow="napper")
    Run.objects.filter(id=first.id).update(state={"msg": "a", "seconds": 600})
    Run.objects.filter(id=first.id).update(input={"msg": "a", "seconds": 600})
    doomed = worker_processes.db_worker("doomed", **modules)
    _wait(lambda: Run.objects.filter(id=first.id, status="running").exists(), "the claim")
    second = _submit(registry, project, conversation, "b", policy=policy)
    worker_processes.kill(doomed, signal.SIGKILL)
    doomed.wait(timeout=30)
    worker_processes.db_worker("taker", **modules)
    _wait(
        lambda: Run.objects.filter(id=second.id, status__in=["succeeded", "failed"]).exists(),
        "the second run to end",
    )
    first.refresh_from_db()
    second.refresh_from_db()
    assert second.status == "succeeded"
    assert _types(second) == ["run.created", "run.enqueued", "run.released", *CHAT_TAIL]
    if policy == "enqueue":
        assert first.status == "succeeded"
        assert _types(first) == [
            "run.created",
            "run.claimed",
            "lease.expired",
            "run.claimed",
            "step.completed",
            "step.completed",
            "run.succeeded",
        ]
        assert _texts(second) == ["hello", "nap a", "reply a", "heard b", "reply b"]
    else:
        assert first.status == "cancelled"
        assert _types(first) == [
            "run.created",
            "run.claimed",
            "run.interrupt_requested",
            "lease.expired",
            "run.interrupted",
        ]
        assert _texts(second) == ["hello", "heard b", "reply b"]
