"""Execution semantics reconciled with OpenRath 2.0 (issue 17, item 4): step timeouts, a
preemption that leaves debuggers and profilers working, interrupt expiry, in-process
idempotency, ``input_schema`` / ``state_schema``, OpenRath's event names."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from openrath_project import flow
from openrath_project.errors import Conflict, ValidationFailed
from runs_app import executor, registration, services
from runs_app.events import OPENRATH_EVENT_TYPES, openrath_event_type
from runs_app.interrupts import interrupts_expire
from runs_app.models import Checkpoint, Interrupt, Run, RunEvent
from runs_app.plan import PlanError, compile_workflow
from runs_app.registry import WorkflowRegistry
from sessions_app.models import Session
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import durable, openrath_style, semantics
from tests.support import error_of

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def registry(monkeypatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([durable.__name__, openrath_style.__name__, semantics.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    durable.CALLS.clear()
    return fresh


def _start(registry, project, name, state, **kwargs):
    run, _ = services.run_create(
        project=project, workflow=registry.get(name), state=state, **kwargs
    )
    return run


def _types(run):
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


# --- Step timeouts ---------------------------------------------------------------------------


def test_a_step_that_returns_after_its_timeout_is_timed_out(registry, project, monkeypatch):
    # Preemption off: the step returns (0.6 s) past its 0.2 s timeout and must still time out,
    # as in OpenRath. Before, such a short overrun was committed and the run succeeded.
    monkeypatch.setattr(executor.Watchdog, "_interrupt", lambda self, exc_type: None)
    run = _start(registry, project, "sem-overrun", {"seconds": 0.6})
    done = drive(registry, run.id)
    assert done.status == "timed_out"
    assert done.output is None
    assert done.state == {"seconds": 0.6}  # the late result is discarded
    assert done.error["type"] == "StepTimeout"
    assert done.error["step"] == "nap"
    assert "over its timeout_seconds=0.2; its result is discarded" in done.error["message"]
    assert not Checkpoint.objects.filter(run=done).exists()
    assert _types(done) == ["run.created", "run.claimed", "run.timed_out"]


def test_a_step_within_its_timeout_succeeds(registry, project):
    done = drive(registry, _start(registry, project, "sem-quick", {}).id)
    assert (done.status, done.output) == ("succeeded", {"fast": True})


def test_a_long_synchronous_step_is_still_preempted(registry, project):
    done = drive(registry, _start(registry, project, "sem-spin", {}).id)
    assert done.status == "timed_out"
    assert (done.error["type"], done.error["message"], done.error["step"]) == (
        "StepTimeout",
        "StepTimeout",  # the watchdog's stop (the busy loop would run 120 s)
        "spin",
    )


def test_the_watchdog_raises_into_a_step_only_to_stop_it(registry, project, monkeypatch):
    # Before, every step ended with PyThreadState_SetAsyncExc(tid, NULL), which on CPython
    # 3.11 leaves the eval-breaker flag set for good (see the subprocess test below).
    raised = []
    original = executor._raise_in_thread
    monkeypatch.setattr(
        executor, "_raise_in_thread", lambda tid, exc: (raised.append(exc), original(tid, exc))
    )
    drive(registry, _start(registry, project, "linear", {"who": "ada"}).id)
    assert raised == []
    drive(registry, _start(registry, project, "sem-spin", {}).id)
    assert [exc.__name__ for exc in raised] == ["StepTimeout"]
    assert issubclass(raised[0], executor.StepTimeout)


def test_profilers_and_tracers_keep_working_after_steps_ran(tmp_path):
    """Runs workflows (one preempted) in a fresh process, then one under cProfile and one under
    sys.settrace. Before the fix the profiled run never finished (the timeout fails it)."""
    env = {**os.environ, "OPENRATH_DATA_DIR": str(tmp_path / "data")}
    for name in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "OPENRATH_PROFILE"):
        env.pop(name, None)
    probe = subprocess.run(
        [sys.executable, "-m", "tests.runs_app.tracing_probe"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.splitlines() == [
        "plain succeeded",
        "preempted timed_out",
        "profiled succeeded",
        "traced succeeded True",
    ]


# --- Interrupt expiry ------------------------------------------------------------------------


def _waiting(registry, project, **state):
    run = _start(registry, project, "approval", {"report": "Q3", **state})
    waiting = drive(registry, run.id)
    assert waiting.status == "waiting"
    return waiting, Interrupt.objects.get(run=waiting)


def test_an_expired_interrupt_without_a_default_times_the_run_out(registry, project):
    run, interrupt = _waiting(registry, project, timeout=60)
    assert interrupts_expire(now=timezone.now() + timedelta(minutes=2)) == 1
    interrupt.refresh_from_db()
    assert (interrupt.status, interrupt.decision, interrupt.resolved_by, interrupt.reason) == (
        "expired",
        "reject",
        "system:expiry",
        "expired",
    )
    run.refresh_from_db()
    assert run.status == "timed_out"
    assert run.finished_at is not None
    assert run.error == {
        "type": "InterruptExpired",
        "message": "interrupt 'Publish the report?' was not decided within 60s "
        "and declares no default",
        "step": "review",
        "interrupt": str(interrupt.id),
    }
    last = RunEvent.objects.filter(run=run).order_by("-seq").first()
    assert (last.type, last.step, last.data["reason"]) == (
        "run.timed_out",
        "review",
        "interrupt expired",
    )
    assert openrath_event_type(last.type, last.data) == "run.interrupt.expired"
    assert Session.objects.get(id=run.session_id).writer_run_id is None
    assert durable.CALLS["review"] == 1  # the step is not run again
    assert interrupts_expire(now=timezone.now() + timedelta(minutes=3)) == 0


def test_an_expired_interrupt_with_a_declared_reject_default_requeues(registry, project):
    run, _ = _waiting(registry, project, timeout=60, default={"decision": "reject"})
    assert interrupts_expire(now=timezone.now() + timedelta(minutes=2)) == 1
    done = drive(registry, run.id)
    assert done.status == "succeeded"
    assert done.output == {
        "report": "Q3",
        "timeout": 60,
        "default": {"decision": "reject"},
        "approved": False,
        "reason": "expired",
    }
    assert "interrupt.expired" in _types(done)


# --- Idempotent in-process submission -----------------------------------------------------


def test_in_process_submission_with_the_same_key_and_another_request_conflicts(registry, project):
    workflow = registry.get("linear")
    first, created = services.run_create(
        project=project, workflow=workflow, state={"who": "ada"}, idempotency_key="k-1"
    )
    again, created_again = services.run_create(
        project=project, workflow=workflow, state={"who": "ada"}, idempotency_key="k-1"
    )
    assert (created, created_again, again.id) == (True, False, first.id)
    before = (Run.objects.count(), Session.objects.count(), RunEvent.objects.count())
    for changed in (
        {"state": {"who": "bob"}},
        {"state": {"who": "ada"}, "priority": 5},
        {"state": {"who": "ada"}, "user_message": "hello"},
    ):
        with pytest.raises(Conflict) as conflict:
            services.run_create(
                project=project, workflow=workflow, idempotency_key="k-1", **changed
            )
        assert conflict.value.code == "idempotency_conflict"
        assert conflict.value.details == {"run": str(first.id)}
    with pytest.raises(Conflict):  # another workflow under the same key
        services.run_create(
            project=project, workflow=registry.get("sem-quick"), idempotency_key="k-1"
        )
    assert (Run.objects.count(), Session.objects.count(), RunEvent.objects.count()) == before


# --- input_schema / state_schema -------------------------------------------------------------


def test_the_schemas_are_part_of_the_plan_when_declared():
    plan = compile_workflow(semantics.Counter)
    assert plan.input_schema == semantics.COUNTER_SCHEMA
    assert plan.to_dict()["state_schema"] == semantics.COUNTER_SCHEMA
    plain = compile_workflow(semantics.Quick)
    assert set(plain.to_dict()) == {"format", "name", "version", "entry", "nodes"}

    class Reworded(semantics.Counter):
        state_schema = {"type": "object"}

    class Same(semantics.Counter):
        pass

    # Same name and nodes: only the schema tells them apart (a changed schema is plan drift).
    assert compile_workflow(Same).hash == plan.hash
    assert compile_workflow(Reworded).hash != plan.hash


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": 5}, "input_schema is not a valid JSON Schema: 5 is not valid under any"),
        ([1], "input_schema must be a JSON Schema object (a dict) or None, got [1]"),
    ],
)
def test_an_invalid_schema_does_not_compile(schema, message):
    class Bad(flow.Workflow):
        name = "sem-bad-schema"
        input_schema = schema

        @flow.step(entry=True, effects="none")
        def only(self, state, ctx):
            return state

    with pytest.raises(PlanError) as error:
        compile_workflow(Bad)
    assert str(error.value).startswith(message)


def test_a_submitted_state_is_checked_against_input_schema(registry, project):
    before = (Run.objects.count(), Session.objects.count())
    with pytest.raises(ValidationFailed) as bad:
        _start(registry, project, "sem-counter", {"n": -1, "label": 7})
    assert bad.value.details == {
        "state.label": ["7 is not of type 'string'"],
        "state.n": ["-1 is less than the minimum of 0"],
    }
    assert str(bad.value) == (
        "state does not match the workflow's input_schema: state.label: 7 is not of type 'string'"
    )
    with pytest.raises(ValidationFailed) as missing:
        _start(registry, project, "sem-counter", {})
    assert missing.value.details == {"state": ["'n' is a required property"]}
    assert (Run.objects.count(), Session.objects.count()) == before
    done = drive(registry, _start(registry, project, "sem-counter", {"n": 0}).id)
    assert (done.status, done.output) == ("succeeded", {"n": 3})


def test_a_bad_submit_over_http_is_a_400_with_the_error_body(
    registry, project, make_token, client_for
):
    client = client_for(make_token(["runs:write", "runs:read"]))
    before = (Run.objects.count(), Session.objects.count())
    response = client.post(
        "/api/v1/runs/",
        {"workflow": "sem-counter", "project": "research", "state": {"n": "one"}},
        format="json",
    )
    assert response.status_code == 400
    assert error_of(response) == {
        "code": "invalid",
        "message": "state does not match the workflow's input_schema: "
        "state.n: 'one' is not of type 'integer'",
        "details": {"state.n": ["'one' is not of type 'integer'"]},
    }
    assert (Run.objects.count(), Session.objects.count()) == before
    ok = client.post(
        "/api/v1/runs/",
        {"workflow": "sem-counter", "project": "research", "state": {"n": 1}},
        format="json",
    )
    assert ok.status_code == 201


def test_a_step_returning_a_state_that_breaks_state_schema_fails(registry, project):
    done = drive(registry, _start(registry, project, "sem-counter", {"n": 0, "label": "break"}).id)
    assert done.status == "failed"
    assert done.error == {
        "type": "StateSchemaError",
        "message": "the state step 'second' returned does not match the workflow's "
        "state_schema: state.n: 'not a number' is not of type 'integer'",
        "step": "second",
        "attempt": 1,
        "details": {"state.n": ["'not a number' is not of type 'integer'"]},
    }
    # Only the first step's checkpoint; the bad state was never committed (nor retried).
    assert list(Checkpoint.objects.filter(run=done).values_list("step", flat=True)) == ["first"]
    assert done.state == {"n": 1, "label": "break"}
    assert _types(done)[-1] == "run.failed"
    assert "step.retry_scheduled" not in _types(done)


# --- Event names -----------------------------------------------------------------------------


def test_our_events_map_to_openrath_names(registry, project):
    done = drive(registry, _start(registry, project, "linear", {"who": "ada"}).id)
    events = RunEvent.objects.filter(run=done).order_by("seq")
    assert [openrath_event_type(e.type, e.data) for e in events] == [
        "run.created",
        "run.claimed",
        "run.checkpoint.created",
        "run.checkpoint.created",
        "run.checkpoint.created",
        "run.execution.completed",
    ]
    assert openrath_event_type("run.failed") == "run.execution.failed"
    assert openrath_event_type("run.timed_out", {"type": "StepTimeout"}) == "run.execution.failed"
    assert openrath_event_type("interrupt.resolved") == "run.interrupt.decided"
    assert openrath_event_type("branches.started") is None
    assert openrath_event_type("something.new") == "something.new"
    assert set(OPENRATH_EVENT_TYPES) >= {
        "run.created",
        "run.claimed",
        "step.completed",
        "router.decided",
        "step.retry_scheduled",
        "run.succeeded",
        "run.failed",
        "run.timed_out",
        "run.waiting",
        "interrupt.resolved",
        "interrupt.expired",
        "lease.expired",
        "run.cancelled",
        "run.needs_review",
        "run.resumed",
        "lease.released",
    }
