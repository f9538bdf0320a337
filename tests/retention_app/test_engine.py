"""Retention on runs the engine executed: pruned checkpoints still rebuild (through the product's
own readers), and the reconciler applies due policies once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from openrath_project.tenancy.models import Project
from retention_app import services
from retention_app.models import RetentionPass, RetentionPolicy
from runs_app import selectors as run_selectors
from runs_app import services as run_services
from runs_app.models import Checkpoint, Run, RunEvent
from runs_app.reconciler import reconcile
from runs_app.registry import WorkflowRegistry
from runs_app.services.checkpoints import run_state_at
from tests.runs_app.conftest import drive

pytestmark = pytest.mark.django_db(transaction=True)


def _executed(registry: WorkflowRegistry, project: Project, who: str) -> Run:
    run, _ = run_services.run_create(
        project=project,
        workflow=registry.get("retention-grow"),
        state={"who": who},
        user_message=f"hello {who}",
    )
    return drive(registry, run.id, until=("succeeded",))


def test_an_executed_run_keeps_rebuilding_after_its_checkpoints_are_pruned(
    registry: WorkflowRegistry, project: Project
) -> None:
    run = _executed(registry, project, "ada")
    seqs = list(Checkpoint.objects.filter(run=run).values_list("seq", flat=True))
    assert seqs == [1, 2, 3, 4, 5, 6]
    assert not Checkpoint.objects.get(run=run, seq=5).full  # a delta the cut must fold
    states = {seq: run_state_at(run, seq) for seq in seqs}
    page_before = run_selectors.checkpoint_page(run, after=3)
    policy = services.policy_create(project=project, created_by="t", checkpoints_keep_last=2)
    report = services.retention_apply(policy=policy, trigger="command")
    assert report.compacted == 1
    kept = list(Checkpoint.objects.filter(run=run).values_list("seq", "full"))
    assert kept == [(5, True), (6, False)]
    run.refresh_from_db()
    for seq in (5, 6):
        assert run_state_at(run, seq) == states[seq]
    page_after = run_selectors.checkpoint_page(run)
    assert [p["state"] for p in page_after] == [p["state"] for p in page_before[-2:]]
    assert RunEvent.objects.filter(run=run).count() == run.event_seq  # events not limited


def test_the_reconciler_applies_a_due_policy_once(
    registry: WorkflowRegistry, project: Project
) -> None:
    old = _executed(registry, project, "old")
    young = _executed(registry, project, "young")
    long_ago = timezone.now() - timedelta(days=90)
    Run.objects.unscoped().filter(id=old.id).update(finished_at=long_ago, created_at=long_ago)
    policy = services.policy_create(
        project=project, created_by="t", runs_max_age_seconds=30 * 86400
    )
    assert reconcile().retention_passes == 0  # a new policy waits FIRST_PASS_DELAY
    RetentionPolicy.objects.unscoped().filter(id=policy.id).update(next_pass_at=timezone.now())
    first = reconcile()
    assert first.retention_passes == 1
    assert not Run.objects.unscoped().filter(id=old.id).exists()
    assert Run.objects.unscoped().filter(id=young.id).exists()
    assert reconcile().retention_passes == 0  # not due again before its interval
    log = RetentionPass.objects.unscoped().get()
    assert (log.trigger, log.removed["runs"], log.complete) == ("reconciler", 1, True)
    policy.refresh_from_db()
    assert policy.next_pass_at > timezone.now() + timedelta(minutes=50)


def test_a_claimed_policy_is_not_applied_by_a_second_reconciler(project: Project) -> None:
    policy = services.policy_create(project=project, created_by="t", runs_keep_last=5)
    due_at = policy.next_pass_at
    # Another reconciler claims it between our listing and our claim: the conditional UPDATE
    # on next_pass_at finds nothing, so this one skips it.
    RetentionPolicy.objects.unscoped().filter(id=policy.id, next_pass_at=due_at).update(
        next_pass_at=due_at + timedelta(seconds=1)
    )
    assert services.retention_due(now=due_at).passes == 0
    assert not RetentionPass.objects.unscoped().exists()
