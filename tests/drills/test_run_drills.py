"""Durable-run drills with real worker processes on real PostgreSQL (and Redis with Celery).

Each drill is bounded in time, asserts exact counts, and kills its processes at the end.
"""

from __future__ import annotations

import signal
import subprocess
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
        {"log": str(log), "slow_step": "s3", "slow_seconds": 4},
    )
    first = processes.db_worker("first")
    wait_for(lambda: events_of(log, "start:s3 "), timeout=60, what="s3 to start")
    processes.kill(first)  # kill -9 the whole worker in the middle of s3
    first.wait(timeout=10)
    second = processes.db_worker("second")
    wait_for(_finished(run.id), timeout=60, what="the run to finish")
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
        {"log": str(log), "slow_step": "s3", "slow_seconds": 6},
    )
    frozen = processes.db_worker("frozen")
    wait_for(lambda: events_of(log, "start:s3 "), timeout=60, what="s3 to start")
    processes.kill(frozen, signal.SIGSTOP)
    stale_token = Run.objects.get(id=run.id).fencing_token
    processes.db_worker("taker")
    wait_for(_finished(run.id), timeout=90, what="the run to finish on the other worker")
    processes.kill(frozen, signal.SIGCONT)
    time.sleep(8)  # the frozen worker wakes up, finishes its sleep, tries to commit
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
    wait_for(_finished(run.id), timeout=90, what="the run to finish")
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
        {"log": str(log), "slow_step": "s2", "slow_seconds": 4},
    )
    first = processes.celery_worker("c1", redis_url)
    sender = Celery("drill-sender", broker=redis_url)
    sender.send_task("runs_app.tasks.execute_run", args=[str(run.id)])
    wait_for(lambda: events_of(log, "start:s2 "), timeout=60, what="s2 to start")
    processes.kill(first)
    first.wait(timeout=10)
    processes.celery_worker("c2", redis_url, beat=True)  # beat runs the reconciler
    wait_for(_finished(run.id), timeout=90, what="the run to finish on the second worker")
    assert _status(run.id) == "succeeded"
    assert _step_counts(log, "s1") == (1, 1)
    assert _step_counts(log, "s2") == (2, 1)
    assert _step_counts(log, "s3") == (1, 1)
    sender.close()


def test_redis_down_the_database_worker_finishes(
    processes, drill_registry, project, tmp_path, redis_url
):
    """Redis stops in the middle of a run; the run's retry timer fires while it is down and
    the database-claiming worker finishes the run. Redis is restarted at the end."""
    from celery import Celery

    log = tmp_path / "steps.log"
    run = _start(
        drill_registry,
        project,
        "drill_steps",
        {"log": str(log), "fail_once": True, "slow_step": "s2", "slow_seconds": 2},
    )
    celery_worker = processes.celery_worker("before-outage", redis_url)
    sender = Celery("drill-sender", broker=redis_url)
    sender.send_task("runs_app.tasks.execute_run", args=[str(run.id)])
    wait_for(lambda: events_of(log, "start:s2 "), timeout=60, what="s2 to start")
    subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", "6379", "shutdown", "nosave"],
        capture_output=True,
        timeout=10,
    )
    try:
        wait_for(lambda: events_of(log, "fail:s3 "), timeout=60, what="s3 to fail once")
        processes.kill(celery_worker)
        processes.db_worker("db-during-outage")
        wait_for(_finished(run.id), timeout=90, what="the run to finish without Redis")
    finally:
        subprocess.run(
            [
                "redis-server",
                "--daemonize",
                "yes",
                "--bind",
                "127.0.0.1",
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            capture_output=True,
            timeout=10,
        )
        wait_for(
            lambda: (
                subprocess.run(["redis-cli", "ping"], capture_output=True, timeout=5).stdout.strip()
                == b"PONG"
            ),
            timeout=30,
            what="Redis to come back",
        )
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
        {"log": str(log), "slow_step": "s2", "slow_seconds": 30},
    )
    processes.db_worker("cancelled")
    wait_for(lambda: events_of(log, "start:s2 "), timeout=60, what="s2 to start")
    before = Checkpoint.objects.filter(run_id=run.id).count()
    services.run_cancel(run=Run.objects.get(id=run.id), reason="drill", actor="test")
    time.sleep(5)  # the worker notices at its next heartbeat and stops the step
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
    started = time.monotonic()
    worker = processes.db_worker("stubborn")
    wait_for(lambda: events_of(log, "start:spin "), timeout=60, what="the step to start")
    assert worker.wait(timeout=30) == 70  # soft timeout at 1 s, swallowed; hard exit after 2 s
    assert time.monotonic() - started < 30
    assert _status(run.id) == "running"  # its lease will expire; the reconciler requeues it


def test_non_idempotent_effect_killed_mid_call(processes, drill_registry, project, tmp_path):
    log = tmp_path / "effect.log"
    run = _start(
        drill_registry,
        project,
        "drill_effect",
        {"log": str(log), "text": "report", "effect_seconds": 30},
    )
    first = processes.db_worker("first")
    wait_for(lambda: events_of(log, "effect:report "), timeout=60, what="the effect to start")
    processes.kill(first)
    first.wait(timeout=10)
    processes.db_worker("second")
    wait_for(_finished(run.id), timeout=60, what="the run to need review")
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
    wait_for(_finished(run.id, ("succeeded",)), timeout=60, what="the run to finish")
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
        {"log": str(log), "text": "memo", "effect_seconds": 30},
    )
    first = processes.db_worker("first")
    wait_for(lambda: events_of(log, "effect:memo "), timeout=60, what="the effect to start")
    processes.kill(first)
    first.wait(timeout=10)
    processes.db_worker("second")
    wait_for(_finished(run.id), timeout=60, what="the run to need review")
    effect = EffectRecord.objects.get(run_id=run.id)
    Run.objects.filter(id=run.id).update()  # no-op: the state is read fresh below
    run_state = Run.objects.get(id=run.id)
    assert run_state.status == "needs_review"
    # shorten the effect for the second call: same request digest needs the same args, so
    # the re-run takes 30 s as well; wait for it
    effect_resolve(
        effect=effect, outcome="not_applied", request_digest=effect.request_digest, actor="drill"
    )
    wait_for(
        lambda: len(events_of(log, "effect:memo ")) == 2,
        timeout=30,
        what="the effect to be called once more",
    )
    wait_for(_finished(run.id, ("succeeded",)), timeout=60, what="the run to finish")
    assert len(events_of(log, "effect:memo ")) == 2
    effect.refresh_from_db()
    assert (effect.status, effect.attempts) == ("succeeded", 2)


def test_idempotent_effect_is_retried_with_its_key(processes, drill_registry, project, tmp_path):
    log = tmp_path / "effect.log"
    run = _start(
        drill_registry,
        project,
        "drill_effect",
        {"log": str(log), "text": "sync", "effect_seconds": 3, "idempotent": True},
    )
    first = processes.db_worker("first")
    wait_for(lambda: events_of(log, "effect:sync "), timeout=60, what="the effect to start")
    processes.kill(first)
    first.wait(timeout=10)
    processes.db_worker("second")
    wait_for(_finished(run.id), timeout=60, what="the run to finish")
    assert _status(run.id) == "succeeded"
    calls = events_of(log, "effect:sync ")
    assert len(calls) == 2  # retried automatically, exactly once more
    assert calls[0].split()[1] == calls[1].split()[1]  # with the same idempotency key
    effect = EffectRecord.objects.get(run_id=run.id)
    assert (effect.status, effect.attempts) == ("succeeded", 2)
    assert lines(log)
