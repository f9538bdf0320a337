"""Runs a caller drives by hand, as OpenRath's scheduler and ledger tests do: a run of an
opaque plan (``create_run``), a claim made by ``transition_run(target=RUNNING)``, effect-ledger
entries written outside a step and fenced by that lease, and ``reconcile_stale_effects``
deciding crashed effects with the takeover's own decision. Every write goes through the
product's services; these tests check that the guarantees hold on that path too."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from effects_app.models import EffectRecord
from effects_app.services import EffectConflict
from openrath_project import flow
from openrath_project.definition import EffectClass, step
from openrath_project.runtime import (
    ConflictError,
    EffectLedger,
    InvocationStatus,
    LocalRuntime,
    Run,
    RunStatus,
    arguments_digest,
    reconcile_stale_effects,
)
from openrath_project.runtime.store import RunStore
from runs_app import services
from runs_app.models import Run as RunRow
from runs_app.models import RunEvent as EventRow
from runs_app.models import WorkflowPlan
from sessions_app.models import LineageEdge
from sessions_app.models import Session as SessionRow

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


class Noop(flow.Workflow):
    name = "compat.byhand.noop"

    @step(entry=True, effects=EffectClass.READ_ONLY)
    def only(self, state, ctx):
        return state


def _bare(**overrides) -> Run:
    values = {
        "plan_id": uuid.uuid4(),
        "revision_id": uuid.uuid4(),
        "session_id": uuid.uuid4(),
        "tenant_id": "local",
        "next_nodes": ("start",),
    }
    values.update(overrides)
    return Run.create(**values)


def _running(store: RunStore) -> Run:
    queued = store.create_run(_bare())
    return store.transition_run(queued.id, expected_version=0, target=RunStatus.RUNNING)


def _counts(run_id: uuid.UUID) -> tuple[object, ...]:
    row = RunRow.objects.get(id=run_id)
    return (
        row.status,
        row.fencing_token,
        row.event_seq,
        EventRow.objects.filter(run_id=run_id).count(),
        EffectRecord.objects.filter(run_id=run_id).count(),
    )


# -- create_run: a queued run of an opaque plan ---------------------------------------------


def test_create_run_queues_a_run_of_an_opaque_plan_with_a_new_working_session():
    store = RunStore.configured()
    bare = _bare(state={"n": 1}, priority=5)

    run = store.create_run(bare)

    assert run.status is RunStatus.QUEUED
    assert run.version == 0
    assert (run.workflow, run.priority, run.next_nodes) == ("", 5, ("start",))
    assert dict(run.state) == {"n": 1}
    row = RunRow.objects.get(id=run.id)
    plan = WorkflowPlan.objects.get(hash=row.plan_id)
    assert plan.definition["format"] == "openrath.opaque-plan/1"
    assert plan.definition["plan_id"] == str(bare.plan_id)
    assert plan.graph == {"nodes": [], "edges": []}
    # the session id named no stored session: the run got a new working session
    assert row.session_id is not None
    assert row.session_id != bare.session_id
    assert [e.type for e in store.list_run_events(run.id)] == ["run.created"]


def test_create_run_on_a_stored_session_works_on_a_fork_of_it():
    from openrath_project.library import default_project
    from sessions_app import services as session_services

    stored = session_services.session_create(project=default_project(), title="given")
    run = RunStore.configured().create_run(_bare(session_id=stored.id))

    working_id = RunRow.objects.get(id=run.id).session_id
    assert working_id is not None
    working = SessionRow.objects.get(id=working_id)
    assert working.id != stored.id
    edge = LineageEdge.objects.get(child_id=working.id)
    assert (edge.parent_id, edge.op) == (stored.id, "fork")


def test_create_run_idempotency_key_returns_the_first_run_or_conflicts():
    store = RunStore.configured()
    same = {"plan_id": uuid.uuid4(), "revision_id": uuid.uuid4(), "session_id": None}
    first = store.create_run(_bare(**same, idempotency_key="k-1"))
    again = store.create_run(_bare(**same, idempotency_key="k-1"))
    assert again.id == first.id
    with pytest.raises(ConflictError, match="different request"):
        store.create_run(_bare(**same, idempotency_key="k-1", priority=3))
    assert RunRow.objects.filter(idempotency_key="k-1").count() == 1


def test_create_run_refuses_a_run_that_is_not_queued_and_an_unknown_tenant_here():
    store = RunStore.configured()
    before = RunRow.objects.count()
    with pytest.raises(ConflictError, match="created queued"):
        store.create_run(_bare(status=RunStatus.RUNNING))
    # a configured process (this test run) never creates tenants on the fly
    with pytest.raises(LookupError, match="no project tenant-x/default"):
        store.create_run(_bare(tenant_id="tenant-x"))
    assert RunRow.objects.count() == before


def test_workers_never_take_an_opaque_run():
    from runs_app.executor import run_one
    from runs_app.registry import WorkflowRegistry

    store = RunStore.configured()
    run = store.create_run(_bare())
    before = _counts(run.id)

    assert run_one("server-worker", registry=WorkflowRegistry()) is None
    assert run_one("server-worker", registry=WorkflowRegistry(), run_id=run.id) is None
    runtime = LocalRuntime(store)
    runtime.register(Noop())
    assert runtime.work_once(worker_id="local") is None
    assert _counts(run.id) == before
    assert store.get_run(run.id).status is RunStatus.QUEUED

    # a store's claim takes it: the caller holds it
    claim = store.claim_next(worker_id="by-hand", lease_seconds=30)
    assert claim is not None
    assert claim.run.id == run.id
    assert (claim.run.status, claim.lease.fencing_token) == (RunStatus.RUNNING, 1)


# -- transition_run(target=RUNNING): a claim by the store -------------------------------------


def test_transition_to_running_is_a_claim_by_this_store():
    store = RunStore.configured()
    queued = store.create_run(_bare())

    running = store.transition_run(queued.id, expected_version=0, target=RunStatus.RUNNING)

    assert running.status is RunStatus.RUNNING
    assert running.version == 1
    assert running.fencing_token == 1
    assert running.lease_owner == store.worker_id
    assert running.lease_expires_at is not None
    assert running.lease_expires_at > timezone.now() + timedelta(seconds=5)
    assert store.list_run_events(queued.id)[-1].product_type == "run.claimed"
    store.assert_fencing_token(queued.id, worker_id=store.worker_id, fencing_token=1)
    # claimed once: the stale version, and a second claim, are refused and change nothing
    before = _counts(queued.id)
    with pytest.raises(ConflictError, match="version 1, not 0"):
        store.transition_run(queued.id, expected_version=0, target=RunStatus.RUNNING)
    with pytest.raises(ConflictError):
        store.transition_run(queued.id, expected_version=1, target=RunStatus.RUNNING)
    assert _counts(queued.id) == before


# -- the effect ledger written by hand, fenced by the held lease ------------------------------


def test_a_completed_effect_is_returned_again_for_its_key():
    store = RunStore.configured()
    run = _running(store)
    ledger = EffectLedger()
    digest = arguments_digest({"to": "someone@example.test"})

    prepared = ledger.prepare(
        run_id=run.id,
        tool_name="mail.send@1",
        effect_class=EffectClass.NON_IDEMPOTENT,
        arguments_digest=digest,
        idempotency_key="mail-1",
    )
    assert (prepared.status, prepared.attempts) == (InvocationStatus.PREPARED, 0)
    assert (prepared.tool_name, prepared.idempotency_key) == ("mail.send@1", "mail-1")
    assert prepared.arguments_digest == digest
    dispatched = ledger.mark_dispatched(prepared.id)
    assert (dispatched.status, dispatched.attempts) == (InvocationStatus.DISPATCHED, 1)
    done = ledger.complete(prepared.id, {"message_id": "m-1"})
    assert done.status is InvocationStatus.SUCCEEDED
    assert dict(done.result) == {"message_id": "m-1"}

    replay = ledger.prepare(
        run_id=run.id,
        tool_name="mail.send@1",
        effect_class=EffectClass.NON_IDEMPOTENT,
        arguments_digest=digest,
        idempotency_key="mail-1",
    )
    assert replay == done
    assert EffectRecord.objects.filter(run_id=run.id).count() == 1
    assert ledger.watermark(run.id) == 1
    record = EffectRecord.objects.get(id=done.id)
    assert (record.step, record.key, record.fencing_token) == ("", "mail-1", 1)

    with pytest.raises(EffectConflict, match="another tool or other arguments"):
        ledger.prepare(
            run_id=run.id,
            tool_name="mail.send@1",
            effect_class=EffectClass.NON_IDEMPOTENT,
            arguments_digest=arguments_digest({"to": "someone.else@example.test"}),
            idempotency_key="mail-1",
        )
    with pytest.raises(ConflictError, match="it cannot be dispatched"):
        ledger.mark_dispatched(done.id)


def test_a_failed_effect_and_a_complete_from_prepared():
    store = RunStore.configured()
    run = _running(store)
    ledger = EffectLedger()
    failing = ledger.prepare(
        run_id=run.id,
        tool_name="object.put@1",
        effect_class=EffectClass.IDEMPOTENT,
        arguments_digest=arguments_digest({"key": "a"}),
        idempotency_key=None,
    )
    ledger.mark_dispatched(failing.id)
    failed = ledger.fail(failing.id, "the store said no")
    assert failed.status is InvocationStatus.FAILED
    assert dict(failed.error) == {"type": "EffectFailed", "message": "the store said no"}

    direct = ledger.prepare(
        run_id=run.id,
        tool_name="lookup@1",
        effect_class=EffectClass.READ_ONLY,
        arguments_digest=arguments_digest({}),
        idempotency_key="lookup",
    )
    completed = ledger.complete(direct.id, {"ok": True})
    assert (completed.status, completed.attempts) == (InvocationStatus.SUCCEEDED, 1)
    assert completed.effect_class == "read_only"
    assert EffectRecord.objects.get(id=direct.id).effect_class == "idempotent"


def test_ledger_writes_need_a_lease_held_here_and_a_stale_one_is_refused():
    store = RunStore.configured()
    ledger = EffectLedger()
    queued = store.create_run(_bare())
    before = _counts(queued.id)
    with pytest.raises(ConflictError, match="no lease on run .* is held in this process"):
        ledger.prepare(
            run_id=queued.id,
            tool_name="mail.send@1",
            effect_class=EffectClass.NON_IDEMPOTENT,
            arguments_digest=arguments_digest({}),
            idempotency_key="k",
        )
    assert _counts(queued.id) == before

    running = store.transition_run(queued.id, expected_version=0, target=RunStatus.RUNNING)
    prepared = ledger.prepare(
        run_id=running.id,
        tool_name="mail.send@1",
        effect_class=EffectClass.NON_IDEMPOTENT,
        arguments_digest=arguments_digest({}),
        idempotency_key="k",
    )
    # the lease expires and a worker elsewhere claims the run: this process's token is stale
    RunRow.objects.filter(id=running.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=5)
    )
    assert store.requeue_expired_leases() == (running.id,)
    taken = services.lease_claim(worker="elsewhere", run_id=running.id, opaque=True)
    assert taken is not None
    assert taken.token == 2
    before = _counts(running.id)
    with pytest.raises(ConflictError, match="stale fencing token 1"):
        ledger.mark_dispatched(prepared.id)
    with pytest.raises(ConflictError, match="stale fencing token"):
        store.renew_lease(running.id, worker_id=store.worker_id, fencing_token=1)
    assert _counts(running.id) == before
    assert EffectRecord.objects.get(id=prepared.id).status == "prepared"


# -- reconcile_stale_effects: the takeover decision ------------------------------------------


def _started(ledger: EffectLedger, run: Run, tool: str, effect_class: EffectClass):
    invocation = ledger.prepare(
        run_id=run.id,
        tool_name=tool,
        effect_class=effect_class,
        arguments_digest=arguments_digest({"tool": tool}),
        idempotency_key=tool,
    )
    return ledger.mark_dispatched(invocation.id)


def test_reconcile_parks_a_crashed_non_idempotent_effect_and_its_run_for_review():
    store = RunStore.configured()
    run = _running(store)
    ledger = EffectLedger()
    charge = _started(ledger, run, "payment.charge@1", EffectClass.NON_IDEMPOTENT)
    also = _started(ledger, run, "mail.send@1", EffectClass.NON_IDEMPOTENT)
    later = timezone.now() + timedelta(seconds=1)

    # inside the grace period nothing is decided
    early = reconcile_stale_effects(ledger, store, grace_seconds=3600, now=later)
    assert (early.needs_review, early.retryable) == ((), ())
    assert ledger.get(charge.id).status is InvocationStatus.DISPATCHED

    result = reconcile_stale_effects(ledger, store, grace_seconds=0, now=later)

    assert result.needs_review == (charge.id, also.id)
    assert result.retryable == ()
    assert ledger.get(charge.id).status is InvocationStatus.AMBIGUOUS
    assert ledger.get(also.id).status is InvocationStatus.AMBIGUOUS
    parked = store.get_run(run.id)
    assert parked.status is RunStatus.NEEDS_REVIEW
    assert RunRow.objects.get(id=run.id).review_reason == (
        "a non-idempotent effect may or may not have happened"
    )
    # decided once: a second pass finds nothing to decide
    assert reconcile_stale_effects(ledger, store, grace_seconds=0, now=later).needs_review == ()


def test_reconcile_leaves_a_crashed_idempotent_effect_to_be_called_again():
    store = RunStore.configured()
    run = _running(store)
    ledger = EffectLedger()
    put = _started(ledger, run, "object.put@1", EffectClass.IDEMPOTENT)

    result = reconcile_stale_effects(
        ledger, store, grace_seconds=0, now=timezone.now() + timedelta(seconds=1)
    )

    assert result.retryable == (put.id,)
    assert result.needs_review == ()
    # back to prepared (recorded, not in flight): the next attempt calls it again, same key
    assert ledger.get(put.id).status is InvocationStatus.PREPARED
    assert store.get_run(run.id).status is RunStatus.RUNNING


def test_reconcile_requeues_an_expired_lease_and_leaves_its_effects_to_the_next_holder():
    store = RunStore.configured()
    run = _running(store)
    ledger = EffectLedger()
    charge = _started(ledger, run, "payment.charge@1", EffectClass.NON_IDEMPOTENT)
    RunRow.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=5))

    result = reconcile_stale_effects(ledger, store, grace_seconds=0)

    assert result.requeued_runs == (run.id,)
    assert (result.needs_review, result.retryable) == ((), ())
    assert store.get_run(run.id).status is RunStatus.QUEUED
    assert ledger.get(charge.id).status is InvocationStatus.DISPATCHED
    # the next holder (here a hand claim) decides it, by the same decision
    store.transition_run(run.id, expected_version=store.get_run(run.id).version, target="running")
    decided = reconcile_stale_effects(ledger, store, grace_seconds=0)
    assert decided.needs_review == (charge.id,)
    assert store.get_run(run.id).status is RunStatus.NEEDS_REVIEW


CHARGED: list[str] = []


def _charge() -> str:
    CHARGED.append("charged")
    return "c-1"


def test_a_step_effect_found_started_is_decided_by_the_same_takeover():
    """The in-step path uses the same decision: a non-idempotent ``ctx.effect`` found started
    (its worker died during the call) parks the run, with the same reason, and is not called."""
    from effects_app.services import derive_idempotency_key, request_of
    from openrath_project.jsontext import digest

    class Charge(flow.Workflow):
        name = "compat.byhand.charge"

        @step(entry=True)
        def charge(self, state, ctx):
            return {"id": ctx.effect("charge", _charge)}

    CHARGED.clear()
    store = RunStore.configured()
    runtime = LocalRuntime(store)
    run = runtime.submit(Charge())
    assert store.claim_next(worker_id="crashed", lease_seconds=30) is not None
    row = RunRow.objects.get(id=run.id)
    request = request_of(_charge, (), {})
    EffectRecord.objects.create(  # what the crashed worker left: started, never finished
        tenant_id=row.tenant_id,
        project_id=row.project_id,
        run_id=row.id,
        step="charge",
        key="charge",
        idempotency_key=derive_idempotency_key(row.id, "charge", "charge"),
        effect_class="non_idempotent",
        request=request,
        request_digest=digest(request),
        status="started",
        attempts=1,
        fencing_token=1,
    )
    RunRow.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
    assert runtime.requeue_expired_leases() == (run.id,)

    done = runtime.work_once(worker_id="w")

    assert done is not None
    assert done.status is RunStatus.NEEDS_REVIEW
    assert CHARGED == []
    assert EffectRecord.objects.get(run_id=run.id).status == "needs_review"
    assert RunRow.objects.get(id=run.id).review_reason == (
        "a non-idempotent effect may or may not have happened"
    )


# -- a plain script: the library profile's tenant rule ----------------------------------------


def test_a_plain_script_creates_the_tenant_it_names(tmp_path):
    script = textwrap.dedent(
        """
        from uuid import uuid4
        from openrath_project.runtime import Run, RunStatus, SQLiteRunStore
        store = SQLiteRunStore({path!r})
        run = store.create_run(Run.create(plan_id=uuid4(), tenant_id="tenant-1"))
        claim = store.claim_next(worker_id="w", lease_seconds=30)
        print(run.tenant_id, run.project, claim.run.id == run.id, claim.lease.fencing_token)
        """
    ).format(path=str(tmp_path / "runtime.db"))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL") and not k.startswith("OPENRATH_")
    }
    env.update(OPENRATH_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tenant-1", "default", "True", "1"]


# -- an opaque run is shown like any other -----------------------------------------------------


def test_an_opaque_run_reads_through_the_api_and_the_console(tenant, make_token, client_for):
    from django.test import Client

    from tests.factories import MembershipFactory, ProjectFactory, UserFactory

    ProjectFactory(tenant=tenant, slug="default")
    run = RunStore.configured().create_run(_bare(tenant_id=tenant.slug))
    assert run.project == "default"

    api = client_for(make_token(["runs:read"]))
    detail = api.get(f"/api/v1/runs/{run.id}/")
    assert detail.status_code == 200
    assert (detail.json()["status"], detail.json()["workflow"]) == ("queued", "")
    assert api.get(f"/api/v1/runs/{run.id}/events/").status_code == 200

    user = UserFactory(username="operator-opaque")
    user.save()
    MembershipFactory(user=user, tenant=tenant, role="operator")
    console = Client()
    console.force_login(user)
    page = console.get(f"/console/runs/{run.id}/")
    assert page.status_code == 200
