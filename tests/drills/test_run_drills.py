"""Durable-run drills with real worker processes on real PostgreSQL (and Redis with Celery).

Each drill is bounded in time, asserts exact counts, and kills its processes at the end. A drill
that acts while a step or effect runs holds it there until it calls ``workflows.release`` (see
``tests/drills/workflows.py``): nothing depends on how fast the machine is. The waits
(``WAIT``) only bound a drill that fails; they are generous for a loaded machine.
"""

from __future__ import annotations

import signal
import time

import pytest

from effects_app.models import EffectRecord
from effects_app.services import effect_resolve
from runs_app import registry as registry_module
from runs_app import services
from runs_app.models import Checkpoint, Run, RunEvent
from sessions_app.selectors import chunk_all
from tests.drills import workflows
from tests.drills.conftest import events_of, lines, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: How long a drill waits for something that must happen (a worker process starting, a run
#: finishing, a lease expiring): only a failing drill waits that long.
WAIT = 180


@pytest.fixture
def drill_registry():
    fresh = registry_module.WorkflowRegistry()
    fresh.discover([workflows.__name__])
    return fresh


def _start(drill_registry, project, name, state):
    run, _ = services.run_create(project=project, workflow=drill_registry.get(name), state=state)
    return run


def _status(run_id):
    return Run.objects.get(id=run_id).status


def _finished(run_id, statuses=("succeeded", "failed", "cancelled", "timed_out", "needs_review")):
    return lambda: _status(run_id) in statuses


def _step_counts(log, step):
    return len(events_of(log, f"start:{step} ")), len(events_of(log, f"end:{step} "))


def test_kill_9_mid_step_the_run_completes_on_another_worker(
    processes, drill_registry, project, tmp_path
):
    log = tmp_path / "steps.log"
    run = _start(
        drill_registry,
        project,
        "drill_steps",
        {"log": str(log), "hold_step": "s3"},
    )
    first = processes.db_worker("first")
    wait_for(lambda: events_of(log, "start:s3 "), timeout=WAIT, what="s3 to start")
    processes.kill(first)  # kill -9 the whole worker in the middle of s3 (held there)
    first.wait(timeout=WAIT)
    workflows.release(log)
    second = processes.db_worker("second")
    wait_for(_finished(run.id), timeout=WAIT, what="the run to finish")
    done = Run.objects.get(id=run.id)
    assert done.status == "succeeded"
    assert done.output["done"] == ["s1", "s2", "s3", "s4", "s5"]
    # every completed step ran exactly once; the interrupted one at most once more
    assert _step_counts(log, "s1") == (1, 1)
    assert _step_counts(log, "s2") == (1, 1)
    assert _step_counts(log, "s3") == (2, 1)
    assert _step_counts(log, "s4") == (1, 1)
    assert _step_counts(log, "s5") == (1, 1)
    checkpoints = list(
        Checkpoint.objects.filter(run=done).order_by("seq").values_list("step", flat=True)
    )
    assert checkpoints == ["s1", "s2", "s3", "s4", "s5"]
    types = list(RunEvent.objects.filter(run=done).values_list("type", flat=True))
    assert types.count("lease.expired") == 1
    # the run's session view holds each step's chunk exactly once
    texts = [c.content["text"] for c in chunk_all(done.session_id)]
    assert texts == ["s1 done", "s2 done", "s3 done", "s4 done", "s5 done"]
    second.send_signal(signal.SIGTERM)


def test_a_frozen_worker_commits_nothing_after_takeover(
    processes, drill_registry, project, tmp_path
):
    log = tmp_path / "steps.log"
    run = _start(
        drill_registry,
        project,
        "drill_steps",
        {"log": str(log), "hold_step": "s3"},
    )
    frozen = processes.db_worker("frozen")
    wait_for(lambda: events_of(log, "start:s3 "), timeout=WAIT, what="s3 to start")
    processes.kill(frozen, signal.SIGSTOP)
    stale_token = Run.objects.get(id=run.id).fencing_token
    workflows.release(log)
    processes.db_worker("taker")
    wait_for(_finished(run.id), timeout=WAIT, what="the run to finish on the other worker")
    # The frozen worker wakes up, finishes its step and tries to commit; SIGTERM lets it end
    # that run first, so once it has exited it has tried everything it would have.
    processes.kill(frozen, signal.SIGCONT)
    processes.kill(frozen, signal.SIGTERM)
    frozen.wait(timeout=WAIT)
    done = Run.objects.get(id=run.id)
    assert done.status == "succeeded"
    assert not Checkpoint.objects.filter(
        run=done, fencing_token=stale_token, step__in=["s3", "s4", "s5"]
    ).exists()
    assert Checkpoint.objects.filter(run=done).count() == 5
    texts = [c.content["text"] for c in chunk_all(done.session_id)]
    assert texts == ["s1 done", "s2 done", "s3 done", "s4 done", "s5 done"]
    frozen_pid = str(frozen.pid)
    assert not [line for line in events_of(log, "start:s4 ") if line.endswith(frozen_pid)]


def test_duplicate_delivery_executes_once(processes, drill_registry, project, tmp_path, redis_url):
    from celery import Celery

    log = tmp_path / "steps.log"
    run = _start(drill_registry, project, "drill_steps", {"log": str(log)})
    processes.celery_worker("dup", redis_url, concurrency=2)
    sender = Celery("drill-sender", broker=redis_url)
    for _ in range(2):  # the same execute_run delivered twice at once
        sender.send_task("runs_app.tasks.execute_run", args=[str(run.id)])
    wait_for(_finished(run.id), timeout=WAIT, what="the run to finish")
    assert _status(run.id) == "succeeded"
    for step in ("s1", "s2", "s3", "s4", "s5"):
        assert _step_counts(log, step) == (1, 1)
    assert RunEvent.objects.filter(run_id=run.id, type="run.claimed").count() == 1
    sender.close()


def test_kill_9_a_celery_worker_mid_step(processes, drill_registry, project, tmp_path, redis_url):
    from celery import Celery

    log = tmp_path / "steps.log"
    run = _start(
        drill_registry,
        project,
        "drill_steps",
        {"log": str(log), "hold_step": "s2"},
    )
    first = processes.celery_worker("c1", redis_url)
    sender = Celery("drill-sender", broker=redis_url)
    sender.send_task("runs_app.tasks.execute_run", args=[str(run.id)])
    wait_for(lambda: events_of(log, "start:s2 "), timeout=WAIT, what="s2 to start")
    processes.kill(first)
    first.wait(timeout=WAIT)
    workflows.release(log)
    processes.celery_worker("c2", redis_url, beat=True)  # beat runs the reconciler
    wait_for(_finished(run.id), timeout=WAIT, what="the run to finish on the second worker")
    assert _status(run.id) == "succeeded"
    assert _step_counts(log, "s1") == (1, 1)
    assert _step_counts(log, "s2") == (2, 1)
    assert _step_counts(log, "s3") == (1, 1)
    sender.close()


def test_redis_down_the_database_worker_finishes(processes, drill_registry, project, tmp_path):
    """Redis stops in the middle of a run; the run's retry timer fires while it is down and
    the database-claiming worker finishes the run. The Redis is a private ``redis-server``
    (the machine's shared one, which other test processes use, is never stopped)."""
    from celery import Celery

    from tests.drills.test_outage_drills import PrivateRedis

    redis_server = PrivateRedis(tmp_path / "redis")
    redis_server.start()
    log = tmp_path / "steps.log"
    run = _start(
        drill_registry,
        project,
        "drill_steps",
        {"log": str(log), "fail_once": True, "hold_step": "s2"},
    )
    sender = Celery("drill-sender", broker=redis_server.url)
    try:
        celery_worker = processes.celery_worker("before-outage", redis_server.url)
        sender.send_task("runs_app.tasks.execute_run", args=[str(run.id)])
        wait_for(lambda: events_of(log, "start:s2 "), timeout=WAIT, what="s2 to start")
        redis_server.stop()  # abruptly: an outage
        workflows.release(log)  # s2 ends only now that Redis is down
        wait_for(lambda: events_of(log, "fail:s3 "), timeout=WAIT, what="s3 to fail once")
        processes.kill(celery_worker)
        processes.db_worker("db-during-outage")
        wait_for(_finished(run.id), timeout=WAIT, what="the run to finish without Redis")
    finally:
        redis_server.stop()
        sender.close()
    done = Run.objects.get(id=run.id)
    assert done.status == "succeeded"
    claims = list(
        RunEvent.objects.filter(run=done, type="run.claimed")
        .order_by("seq")
        .values_list("data", flat=True)
    )
    assert claims[0]["worker"].startswith("celery:")
    assert claims[-1]["worker"].startswith("db-during-outage")
    assert _step_counts(log, "s3") == (1, 1)
    assert len(events_of(log, "fail:s3 ")) == 1


def test_cancel_during_a_long_step(processes, drill_registry, project, tmp_path):
    log = tmp_path / "steps.log"
    run = _start(
        drill_registry,
        project,
        "drill_steps",
        {"log": str(log), "hold_step": "s2"},
    )
    worker = processes.db_worker("cancelled")
    wait_for(lambda: events_of(log, "start:s2 "), timeout=WAIT, what="s2 to start")
    before = Checkpoint.objects.filter(run_id=run.id).count()
    services.run_cancel(run=Run.objects.get(id=run.id), reason="drill", actor="test")
    # s2 is held (never released): only the cancel can stop it. The worker notices at its next
    # heartbeat; SIGTERM makes it exit once that run is over, which proves the step stopped.
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=WAIT) == 0
    done = Run.objects.get(id=run.id)
    assert done.status == "cancelled"
    assert before == 1
    assert Checkpoint.objects.filter(run=done).count() == 1
    assert _step_counts(log, "s2") == (1, 0)  # stopped inside the step
    texts = [c.content["text"] for c in chunk_all(done.session_id)]
    assert texts == ["s1 done"]


def test_a_step_that_ignores_its_timeout_hits_the_hard_backstop(
    processes, drill_registry, project, tmp_path
):
    log = tmp_path / "steps.log"
    run = _start(drill_registry, project, "drill_stubborn", {"log": str(log)})
    worker = processes.db_worker("stubborn")
    wait_for(lambda: events_of(log, "start:spin "), timeout=WAIT, what="the step to start")
    spinning = time.monotonic()
    # Soft timeout at 1 s, swallowed; hard exit (70) 2 s later. Nothing else ends the spin for
    # minutes, so exit code 70 is the backstop; the bound leaves a loaded machine a wide margin.
    assert worker.wait(timeout=WAIT) == 70
    assert time.monotonic() - spinning < 60
    assert _status(run.id) == "running"  # its lease will expire; the reconciler requeues it


def test_non_idempotent_effect_killed_mid_call(processes, drill_registry, project, tmp_path):
    log = tmp_path / "effect.log"
    run = _start(
        drill_registry,
        project,
        "drill_effect",
        {"log": str(log), "text": "report", "hold_effect": True},
    )
    first = processes.db_worker("first")
    wait_for(lambda: events_of(log, "effect:report "), timeout=WAIT, what="the effect to start")
    processes.kill(first)
    first.wait(timeout=WAIT)
    workflows.release(log)
    processes.db_worker("second")
    wait_for(_finished(run.id), timeout=WAIT, what="the run to need review")
    assert _status(run.id) == "needs_review"
    effect = EffectRecord.objects.get(run_id=run.id)
    assert effect.status == "needs_review"
    assert len(events_of(log, "effect:report ")) == 1  # never called again on its own
    effect_resolve(
        effect=effect,
        outcome="applied",
        request_digest=effect.request_digest,
        result={"published": "report", "by": "operator"},
        actor="drill",
    )
    wait_for(_finished(run.id, ("succeeded",)), timeout=WAIT, what="the run to finish")
    done = Run.objects.get(id=run.id)
    assert done.output["receipt"] == {"published": "report", "by": "operator"}
    assert len(events_of(log, "effect:report ")) == 1


def test_not_applied_calls_the_effect_exactly_once_more(
    processes, drill_registry, project, tmp_path
):
    log = tmp_path / "effect.log"
    run = _start(
        drill_registry,
        project,
        "drill_effect",
        {"log": str(log), "text": "memo", "hold_effect": True},
    )
    first = processes.db_worker("first")
    wait_for(lambda: events_of(log, "effect:memo "), timeout=WAIT, what="the effect to start")
    processes.kill(first)
    first.wait(timeout=WAIT)
    workflows.release(log)  # the call made again below passes straight through
    processes.db_worker("second")
    wait_for(_finished(run.id), timeout=WAIT, what="the run to need review")
    effect = EffectRecord.objects.get(run_id=run.id)
    Run.objects.filter(id=run.id).update()  # no-op: the state is read fresh below
    run_state = Run.objects.get(id=run.id)
    assert run_state.status == "needs_review"
    effect_resolve(
        effect=effect, outcome="not_applied", request_digest=effect.request_digest, actor="drill"
    )
    wait_for(
        lambda: len(events_of(log, "effect:memo ")) == 2,
        timeout=WAIT,
        what="the effect to be called once more",
    )
    wait_for(_finished(run.id, ("succeeded",)), timeout=WAIT, what="the run to finish")
    assert len(events_of(log, "effect:memo ")) == 2
    effect.refresh_from_db()
    assert (effect.status, effect.attempts) == ("succeeded", 2)


def test_idempotent_effect_is_retried_with_its_key(processes, drill_registry, project, tmp_path):
    log = tmp_path / "effect.log"
    run = _start(
        drill_registry,
        project,
        "drill_effect",
        {"log": str(log), "text": "sync", "hold_effect": True, "idempotent": True},
    )
    first = processes.db_worker("first")
    wait_for(lambda: events_of(log, "effect:sync "), timeout=WAIT, what="the effect to start")
    processes.kill(first)
    first.wait(timeout=WAIT)
    workflows.release(log)
    processes.db_worker("second")
    wait_for(_finished(run.id), timeout=WAIT, what="the run to finish")
    assert _status(run.id) == "succeeded"
    calls = events_of(log, "effect:sync ")
    assert len(calls) == 2  # retried automatically, exactly once more
    assert calls[0].split()[1] == calls[1].split()[1]  # with the same idempotency key
    effect = EffectRecord.objects.get(run_id=run.id)
    assert (effect.status, effect.attempts) == ("succeeded", 2)
    assert lines(log)
