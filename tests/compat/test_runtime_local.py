"""OpenRath's durable runtime surface (LocalRuntime, stores, types) over the product's engine:
the same claim/commit path as the workers, exercised from a script's point of view."""

from __future__ import annotations

import threading
import uuid

import pytest

from openrath_project import flow
from openrath_project.context import RunContext
from openrath_project.definition import EffectClass, RetryPolicy, router, step
from openrath_project.runtime import (
    ApprovalDecision,
    ApprovalDecisionKind,
    ConflictError,
    InterruptKind,
    LocalRuntime,
    RunStatus,
    SchemaValidationError,
    UnsupportedOperation,
)
from openrath_project.runtime.store import RunStore
from openrath_project.security import Principal, PrincipalKind, SecurityContext
from runs_app.models import Checkpoint as CheckpointRow
from runs_app.models import Run as RunRow
from runs_app.models import RunEvent as EventRow

pytestmark = pytest.mark.django_db(transaction=True)


class Counter(flow.Workflow):
    name = "compat.runtime.counter"

    @step(entry=True, successors=("route",), effects=EffectClass.READ_ONLY)
    async def start(self, state, ctx):
        return {**state, "count": state.get("count", 0) + 1}

    @router(successors=("finish", "again"))
    def route(self, state):
        return "finish" if state["count"] == 1 else "again"

    @step(effects=EffectClass.READ_ONLY)
    def finish(self, state, ctx):
        return {**state, "result": "done"}

    @step(effects=EffectClass.READ_ONLY)
    def again(self, state, ctx):
        return state


def _runtime() -> tuple[RunStore, LocalRuntime]:
    store = RunStore.configured()
    return store, LocalRuntime(store)


def test_work_once_runs_to_the_end_with_a_checkpoint_per_step():
    store, runtime = _runtime()
    submitted = runtime.submit(Counter(), context=RunContext.local(), state={"count": 0})
    assert submitted.status is RunStatus.QUEUED
    assert submitted.tenant_id == "local"

    done = runtime.work_once(worker_id="w-1")

    assert done is not None
    assert done.id == submitted.id
    assert done.status is RunStatus.SUCCEEDED
    assert dict(done.state) == {"count": 1, "result": "done"}
    checkpoints = store.list_checkpoints(done.id)
    assert [c.sequence for c in checkpoints] == [1, 2, 3]
    assert [c.step for c in checkpoints] == ["start", "route", "finish"]
    assert checkpoints[0].next_nodes == ("route",)
    assert checkpoints[-1].next_nodes == ()
    assert dict(checkpoints[0].state) == {"count": 1}
    types = [e.type for e in store.list_run_events(done.id)]
    assert types[0] == "run.created"
    assert "run.claimed" in types  # OpenRath 2.0 uses our name for this one
    assert types[-1] == "run.execution.completed"
    assert "run.checkpoint.created" in types
    # the product's event names are kept next to OpenRath's
    assert store.list_run_events(done.id)[1].product_type == "run.claimed"
    assert runtime.work_once(worker_id="w-1") is None


def test_max_steps_leaves_the_run_under_its_lease_and_a_takeover_resumes_it():
    from datetime import timedelta

    from django.utils import timezone

    store, runtime = _runtime()
    submitted = runtime.submit(Counter(), state={"count": 0})

    partial = runtime.work_once(worker_id="w-1", max_steps=1, lease_seconds=1)

    assert partial is not None
    assert partial.status is RunStatus.RUNNING
    assert partial.next_nodes == ("route",)
    assert partial.lease_owner == "w-1"
    assert partial.lease_expires_at is not None
    assert partial.lease_expires_at <= timezone.now() + timedelta(seconds=1)
    assert len(store.list_checkpoints(submitted.id)) == 1
    assert store.requeue_expired_leases(now=timezone.now() - timedelta(seconds=5)) == ()

    moment = timezone.now() + timedelta(seconds=5)
    assert runtime.requeue_expired_leases(now=moment) == (submitted.id,)
    resumed = runtime.work_once(worker_id="w-2")

    assert resumed is not None
    assert resumed.status is RunStatus.SUCCEEDED
    assert resumed.fencing_token == 2
    assert dict(resumed.state)["count"] == 1  # the first step is not run again
    assert len(store.list_checkpoints(submitted.id)) == 3


def test_a_step_retry_is_followed_in_the_same_work_once_call():
    attempts = []

    class Flaky(flow.Workflow):
        name = "compat.runtime.flaky"

        @step(
            entry=True,
            effects=EffectClass.IDEMPOTENT,
            idempotency_key="flaky",
            retry=RetryPolicy(max_attempts=3, base_seconds=0.001),
        )
        def call(self, state, ctx):
            attempts.append(ctx.attempt)
            if len(attempts) < 3:
                raise ConnectionError("temporary")
            return {"ok": True}

    store, runtime = _runtime()
    run = runtime.submit(Flaky())
    done = runtime.work_once(worker_id="w")

    assert done is not None
    assert done.status is RunStatus.SUCCEEDED
    assert attempts == [1, 2, 3]
    failed = [e for e in store.list_run_events(run.id) if e.type == "run.step.attempt.failed"]
    assert [e.data["error_type"] for e in failed] == ["ConnectionError", "ConnectionError"]


def test_run_until_done_drives_durable_timers():
    attempts = []

    class Slow(flow.Workflow):
        name = "compat.runtime.timer"

        @step(
            entry=True,
            effects=EffectClass.IDEMPOTENT,
            idempotency_key="timer",
            retry=RetryPolicy(max_attempts=2, base_seconds=0.2),
        )
        def call(self, state, ctx):
            attempts.append(ctx.attempt)
            if len(attempts) == 1:
                raise ConnectionError("later")
            return {"ok": True}

    _, runtime = _runtime()
    run = runtime.submit(Slow())
    done = runtime.run_until_done(run.id, timeout=120)

    assert done.status is RunStatus.SUCCEEDED
    assert attempts == [1, 2]


def test_a_runtime_claims_only_its_own_workflows():
    store, first = _runtime()
    other = LocalRuntime(store)
    run = first.submit(Counter(), state={"count": 0})

    class Unrelated(flow.Workflow):
        name = "compat.runtime.unrelated"

        @step(entry=True)
        def only(self, state, ctx):
            return state

    other.register(Unrelated())
    assert other.work_once(worker_id="other") is None
    assert store.get_run(run.id).status is RunStatus.QUEUED
    assert RunRow.objects.get(id=run.id).fencing_token == 0


def test_security_context_is_read_back_from_the_stored_run():
    seen = []

    class Capture(flow.Workflow):
        name = "compat.runtime.capture"

        @step(entry=True, effects=EffectClass.READ_ONLY)
        def capture(self, state, ctx):
            request = ctx.request
            seen.append((request.security.tenant_id, request.principal.id, request.project))
            return state

    from openrath_project.library import default_project

    default_project()
    context = RunContext(
        security=SecurityContext(
            principal=Principal(id="user-42", kind=PrincipalKind.USER), tenant_id="local"
        )
    )
    store = RunStore.configured()
    LocalRuntime(store).submit(Capture(), context=context)
    # a second runtime (another process, as far as the run knows) executes it
    done = LocalRuntime(store)
    done.register(Capture())
    result = done.work_once(worker_id="w")

    assert result is not None
    assert result.status is RunStatus.SUCCEEDED
    assert result.created_by == "user:user-42"
    assert seen == [("local", "user-42", "default")]


def test_same_idempotency_key_returns_the_first_run_or_conflicts():
    executions = []

    class Once(flow.Workflow):
        name = "compat.runtime.once"

        @step(entry=True, effects=EffectClass.IDEMPOTENT)
        def count(self, state, ctx):
            executions.append(1)
            return state

    store, runtime = _runtime()
    first = runtime.submit(Once(), state={"a": 1}, idempotency_key="k-1")
    again = runtime.submit(Once(), state={"a": 1}, idempotency_key="k-1")
    assert again.id == first.id
    with pytest.raises(ConflictError, match="different request"):
        runtime.submit(Once(), state={"a": 2}, idempotency_key="k-1")
    assert RunRow.objects.filter(idempotency_key="k-1").count() == 1

    runtime.work_once(worker_id="w")
    assert runtime.work_once(worker_id="w") is None
    assert executions == [1]


def test_input_schema_is_checked_at_submit_and_nothing_is_stored():
    class Typed(flow.Workflow):
        name = "compat.runtime.typed"
        input_schema = {
            "type": "object",
            "required": ["n"],
            "properties": {"n": {"type": "integer"}},
        }

        @step(entry=True)
        def only(self, state, ctx):
            return state

    _, runtime = _runtime()
    with pytest.raises(SchemaValidationError, match="does not match the schema"):
        runtime.submit(Typed(), state={"n": "x"})
    assert RunRow.objects.count() == 0
    assert runtime.submit(Typed(), state={"n": 1}).status is RunStatus.QUEUED


def test_cancel_wins_over_a_late_checkpoint():
    entered, release = threading.Event(), threading.Event()

    class Blocked(flow.Workflow):
        name = "compat.runtime.blocked"

        @step(entry=True, effects=EffectClass.READ_ONLY)
        def wait(self, state, ctx):
            entered.set()
            release.wait(timeout=60)
            return {"late": True}

    store, runtime = _runtime()
    run = runtime.submit(Blocked())
    results = []
    worker = threading.Thread(target=lambda: results.append(runtime.work_once(worker_id="w")))
    worker.start()
    assert entered.wait(timeout=60)
    running = store.get_run(run.id)
    assert running.status is RunStatus.RUNNING
    with pytest.raises(ConflictError, match="version"):
        store.transition_run(run.id, expected_version=running.version - 1, target="cancelled")
    cancelled = store.transition_run(
        run.id, expected_version=running.version, target=RunStatus.CANCELLED
    )
    release.set()
    worker.join(timeout=60)

    assert results[0].status is RunStatus.CANCELLED
    assert store.get_run(run.id) == cancelled
    assert store.latest_checkpoint(run.id) is None
    assert CheckpointRow.objects.filter(run_id=run.id).count() == 0


def test_an_interrupt_is_listed_and_decided_through_the_store():
    class Approval(flow.Workflow):
        name = "compat.runtime.approval"

        @step(entry=True)
        def ask(self, state, ctx):
            decision = ctx.interrupt(InterruptKind.APPROVAL, {"arguments": {"to": "a@x"}})
            return {"decision": decision.kind.value, "edited": decision.payload.get("arguments")}

    store, runtime = _runtime()
    run = runtime.submit(Approval())
    waiting = runtime.work_once(worker_id="w")
    assert waiting is not None
    assert waiting.status is RunStatus.WAITING
    (interrupt,) = store.list_interrupts(tenant_id="local")
    assert interrupt.kind is InterruptKind.APPROVAL
    assert interrupt.run_id == run.id
    assert dict(interrupt.request) == {"arguments": {"to": "a@x"}}

    edit = ApprovalDecision(
        kind=ApprovalDecisionKind.EDIT, actor_id="rev", payload={"arguments": {"to": "b@x"}}
    )
    with pytest.raises(ConflictError, match="version"):
        store.decide_interrupt(interrupt.id, decision=edit, expected_run_version=0)
    assert store.get_run(run.id).status is RunStatus.WAITING

    resumed = store.decide_interrupt(
        interrupt.id, decision=edit, expected_run_version=waiting.version
    )
    assert resumed.status is RunStatus.QUEUED
    done = runtime.work_once(worker_id="w2")
    assert done is not None
    assert done.status is RunStatus.SUCCEEDED
    # EDIT is stored as "edit": the step sees that kind, and the edit as the payload
    assert dict(done.state) == {"decision": "edit", "edited": {"to": "b@x"}}
    assert store.list_interrupts(tenant_id="local") == ()
    assert len(store.list_interrupts(tenant_id="local", pending_only=False)) == 1


def test_store_refuses_to_write_checkpoints():
    from openrath_project.runtime import Checkpoint

    store = RunStore.configured()
    before = (RunRow.objects.count(), CheckpointRow.objects.count(), EventRow.objects.count())
    with pytest.raises(UnsupportedOperation, match="work_once"):
        store.append_checkpoint(Checkpoint.create(run_id=uuid.uuid4(), sequence=1))
    assert before == (
        RunRow.objects.count(),
        CheckpointRow.objects.count(),
        EventRow.objects.count(),
    )


def test_a_step_transition_and_ledger_writes_without_a_held_lease_are_refused():
    """``waiting`` is a step's own move, and a ledger entry written by hand needs a lease this
    process holds on the run (tests/compat/test_runtime_by_hand.py): each refusal names the
    alternative and changes nothing."""
    from effects_app.models import EffectRecord
    from openrath_project.runtime import EffectLedger, arguments_digest

    store, runtime = _runtime()
    run = runtime.submit(Counter(), state={"count": 0})
    held = runtime.submit(Counter(), state={"count": 1})
    running = store.transition_run(held.id, expected_version=0, target=RunStatus.RUNNING)
    ledger = EffectLedger()
    before = (
        RunRow.objects.get(id=run.id).status,
        RunRow.objects.get(id=run.id).fencing_token,
        EventRow.objects.filter(run_id=run.id).count(),
        EffectRecord.objects.count(),
        EventRow.objects.filter(run_id=held.id).count(),
    )
    with pytest.raises(UnsupportedOperation, match=r"ctx\.interrupt"):
        store.transition_run(held.id, expected_version=running.version, target="waiting")
    with pytest.raises(ConflictError, match="no lease on run .* is held in this process"):
        ledger.prepare(
            run_id=run.id,
            tool_name="mail.send@1",
            effect_class=EffectClass.NON_IDEMPOTENT,
            arguments_digest=arguments_digest({"to": "a@x"}),
            idempotency_key="mail-1",
        )
    for write in (
        lambda: ledger.mark_dispatched(run.id),
        lambda: ledger.complete(run.id, {"ok": True}),
        lambda: ledger.fail(run.id, "boom"),
    ):
        with pytest.raises(KeyError):  # no such effect
            write()
    assert before == (
        RunRow.objects.get(id=run.id).status,
        RunRow.objects.get(id=run.id).fencing_token,
        EventRow.objects.filter(run_id=run.id).count(),
        EffectRecord.objects.count(),
        EventRow.objects.filter(run_id=held.id).count(),
    )


def test_store_leases_fence_a_stale_token():
    store, runtime = _runtime()
    run = runtime.submit(Counter(), state={"count": 0})
    claim = store.claim_next(worker_id="w-1", lease_seconds=30)
    assert claim is not None
    assert claim.run.id == run.id
    assert claim.run.status is RunStatus.RUNNING
    assert (claim.lease.holder_worker_id, claim.lease.fencing_token) == ("w-1", 1)
    assert store.claim_next(worker_id="w-2", lease_seconds=30) is None

    renewed = store.renew_lease(run.id, worker_id="w-1", fencing_token=1, lease_seconds=120)
    assert renewed.expires_at > claim.lease.expires_at
    with pytest.raises(ConflictError, match="fencing"):
        store.renew_lease(run.id, worker_id="w-1", fencing_token=0, lease_seconds=60)
    store.assert_fencing_token(run.id, worker_id="w-1", fencing_token=1)
    with pytest.raises(ConflictError, match="fencing"):
        store.assert_fencing_token(run.id, worker_id="w-1", fencing_token=0)
