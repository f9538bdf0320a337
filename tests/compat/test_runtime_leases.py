"""The store's queue and lease calls (``claim_next``, ``renew_lease``, ``requeue_expired_leases``,
``assert_fencing_token``) on runs of real workflows: OpenRath's scheduler guarantees, checked on
the product's claim path. (OpenRath's own tests make bare runs with ``create_run``: runs of an
opaque plan here, tested in test_runtime_by_hand.py.)"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from openrath_project import flow
from openrath_project.definition import EffectClass, step
from openrath_project.runtime import ConflictError, LocalRuntime, RunStatus
from openrath_project.runtime.store import RunStore
from runs_app.models import Run as RunRow
from runs_app.models import RunEvent as EventRow

pytestmark = pytest.mark.django_db(transaction=True)


class Noop(flow.Workflow):
    name = "compat.leases.noop"

    @step(entry=True, effects=EffectClass.READ_ONLY)
    def only(self, state, ctx):
        return state


def _store_and_runtime() -> tuple[RunStore, LocalRuntime]:
    store = RunStore.configured()
    return store, LocalRuntime(store)


def test_claims_take_higher_priority_first_then_the_oldest():
    store, runtime = _store_and_runtime()
    low_old = runtime.submit(Noop(), state={"n": 1}, priority=0)
    high = runtime.submit(Noop(), state={"n": 2}, priority=10)
    low_new = runtime.submit(Noop(), state={"n": 3}, priority=0)

    order = []
    for worker in ("a", "b", "c"):
        claim = store.claim_next(worker_id=worker, lease_seconds=30)
        assert claim is not None
        order.append(claim.run.id)
    assert order == [high.id, low_old.id, low_new.id]
    assert store.claim_next(worker_id="d", lease_seconds=30) is None


def test_eight_workers_racing_for_one_run_give_one_claim():
    store, runtime = _store_and_runtime()
    run = runtime.submit(Noop())
    start = threading.Barrier(8)
    claims: list[object] = []
    errors: list[BaseException] = []

    def race(index: int) -> None:
        try:
            start.wait(timeout=60)
            claims.append(store.claim_next(worker_id=f"w-{index}", lease_seconds=30))
        except BaseException as exc:  # reported below: a lost race must be None, not an error
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert errors == []
    winners = [claim for claim in claims if claim is not None]
    assert len(claims) == 8
    assert len(winners) == 1
    row = RunRow.objects.get(id=run.id)
    assert (row.status, row.fencing_token) == ("running", 1)
    assert row.lease_owner == winners[0].lease.holder_worker_id  # type: ignore[attr-defined]
    assert EventRow.objects.filter(run_id=run.id, type="run.claimed").count() == 1


def test_an_expired_lease_is_requeued_and_the_next_claim_fences_the_old_holder():
    store, runtime = _store_and_runtime()
    run = runtime.submit(Noop())
    first = store.claim_next(worker_id="w-1", lease_seconds=1)
    assert first is not None
    assert first.lease.fencing_token == 1

    assert store.requeue_expired_leases(now=timezone.now() - timedelta(seconds=30)) == ()
    assert store.get_run(run.id).status is RunStatus.RUNNING
    assert store.requeue_expired_leases(now=timezone.now() + timedelta(seconds=30)) == (run.id,)
    assert store.get_run(run.id).status is RunStatus.QUEUED

    second = store.claim_next(worker_id="w-2", lease_seconds=30)
    assert second is not None
    assert (second.run.id, second.lease.holder_worker_id, second.lease.fencing_token) == (
        run.id,
        "w-2",
        2,
    )
    store.assert_fencing_token(run.id, worker_id="w-2", fencing_token=2)
    with pytest.raises(ConflictError, match="fencing"):
        store.assert_fencing_token(run.id, worker_id="w-1", fencing_token=1)
    with pytest.raises(ConflictError, match="fencing"):
        store.renew_lease(run.id, worker_id="w-1", fencing_token=1, lease_seconds=60)
    row = RunRow.objects.get(id=run.id)
    assert (row.lease_owner, row.fencing_token) == ("w-2", 2)
