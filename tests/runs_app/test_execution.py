"""The durable runtime end to end on one thread: steps, checkpoints, routers, retries,
fan-out, timeouts, cancellation, plan drift."""

from __future__ import annotations

import pytest

from runs_app import services
from runs_app.models import Checkpoint, Run, RunEvent
from sessions_app.selectors import chunk_all
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import durable

pytestmark = pytest.mark.django_db(transaction=True)


def _start(registry, project, name, state=None, **kwargs):
    run, created = services.run_create(
        project=project, workflow=registry.get(name), state=state or {}, **kwargs
    )
    assert created
    return run


def _events(run):
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def test_linear_run_checkpoints_every_step(registry, project):
    run = _start(registry, project, "linear", {"who": "ada"}, user_message="go")
    done = drive(registry, run.id)
    assert done.status == "succeeded"
    assert done.output == {"who": "ada", "steps": ["one", "two", "three"], "done": True}
    assert durable.CALLS == {"one": 1, "two": 1, "three": 1}
    assert _events(done) == [
        "run.created",
        "run.claimed",
        "step.completed",
        "step.completed",
        "step.completed",
        "run.succeeded",
    ]
    seqs = list(RunEvent.objects.filter(run=done).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 7))
    checkpoints = list(Checkpoint.objects.filter(run=done).order_by("seq"))
    assert [(c.seq, c.step, c.next_nodes, c.session_len) for c in checkpoints] == [
        (1, "one", ["two"], 2),
        (2, "two", ["three"], 3),
        (3, "three", [], 4),
    ]
    assert [c.full for c in checkpoints] == [True, False, False]
    assert checkpoints[1].state == {"set": {"steps": ["one", "two"]}}
    assert services.run_state_at(done, 2) == {"who": "ada", "steps": ["one", "two"]}
    texts = [(c.content["text"], c.step, c.run_id) for c in chunk_all(done.session_id)]
    assert texts == [
        ("go", "", done.id),
        ("one for ada", "one", done.id),
        ("two", "two", done.id),
        ("three", "three", done.id),
    ]


def test_router_records_its_decision(registry, project):
    run = _start(registry, project, "routed", {"amount": 500})
    done = drive(registry, run.id)
    assert done.output == {"amount": 500, "seen": 0, "path": "large"}
    decided = RunEvent.objects.get(run=done, type="router.decided")
    assert (decided.step, decided.data["choice"]) == ("decide", "large")


def test_retries_are_durable_timers(registry, project):
    run = _start(registry, project, "flaky", {"succeed_on": 3})
    done = drive(registry, run.id)
    assert done.status == "succeeded"
    assert done.output == {"succeed_on": 3, "attempt": 3}
    assert _events(done).count("step.retry_scheduled") == 2
    assert _events(done).count("run.claimed") == 3
    retry = RunEvent.objects.filter(run=done, type="step.retry_scheduled").first()
    assert retry.data["type"] == "ConnectionError"
    assert retry.data["next_attempt"] == 2


def test_retries_exhausted_fail_the_run(registry, project):
    run = _start(registry, project, "flaky", {"succeed_on": 99})
    done = drive(registry, run.id)
    assert done.status == "failed"
    assert done.error["type"] == "ConnectionError"
    assert done.error["attempt"] == 3
    assert durable.CALLS["flaky"] == 3


def test_fan_out_runs_branches_and_joins(registry, project):
    run = _start(registry, project, "parallel", {}, user_message="research")
    done = drive(registry, run.id)
    assert done.status == "succeeded", done.error
    assert done.output["found"] == ["A", "B"]
    assert done.output["texts"] == [
        "research",
        "plan: research both",
        "left found A",
        "right found B",
    ]
    children = list(Run.objects.filter(parent=done).order_by("branch"))
    assert [(c.branch, c.status, c.output["found"]) for c in children] == [
        ("left", "succeeded", "A"),
        ("right", "succeeded", "B"),
    ]
    assert done.fanout is None
    assert "branches.started" in _events(done)
    assert "branches.joined" in _events(done)


def test_synchronous_busy_loop_is_stopped(registry, project):
    # Each attempt would spin 120 s; the step's 1 s limit stops both attempts long before one
    # could finish (the bound leaves a loaded machine a wide margin).
    run = _start(registry, project, "slow", {"seconds": 120})
    import time

    started = time.monotonic()
    done = drive(registry, run.id, timeout=300)
    assert time.monotonic() - started < 90
    assert done.status == "timed_out"
    assert done.error["type"] == "StepTimeout"
    assert durable.CALLS["spin"] == 2


def test_plan_drift_sends_the_run_to_review(registry, project, tmp_path):
    from runs_app.registry import WorkflowRegistry
    from tests.runs_app import TempModules

    run = _start(registry, project, "linear")
    modules = TempModules(tmp_path)
    try:
        modules.write(
            "drifted_linear",
            """
            from openrath_project import flow

            class Linear(flow.Workflow):
                name = "linear"

                @flow.step(entry=True, effects="none")
                def one(self, state, ctx):
                    return {**state, "changed": True}
        """,
        )
        changed = WorkflowRegistry()
        changed.discover(["drifted_linear"])
        done = drive(changed, run.id)
    finally:
        modules.close()
    assert done.status == "needs_review"
    assert done.review_reason == "plan drift"
    event = RunEvent.objects.get(run=done, type="run.needs_review")
    assert event.data["pinned"] == run.plan_id
    assert event.data["current"] == changed.get("linear").plan.hash
