"""A pass never removes what a kept object needs or what is still in flight (one test each),
and removes the rest, with foreign keys kept consistent."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from effects_app.models import EffectRecord
from openrath_project.tenancy.models import AuditEvent
from retention_app import services
from retention_app.models import RetentionPass, RetentionPolicy
from runs_app.models import Checkpoint, Interrupt, Run, RunEvent, RunFork
from sessions_app.models import Chunk, LineageEdge, Session
from tests.retention_app.conftest import NOW, World, assert_kept_readable, exists, snapshot

pytestmark = pytest.mark.django_db(transaction=False)

DAY = 24 * 3600


def policy(world: World, **limits: Any) -> RetentionPolicy:
    return services.policy_create(project=world.project, created_by="test", **limits)


def apply(pol: RetentionPolicy) -> services.Report:
    pol.refresh_from_db()
    return services.retention_apply(policy=pol, trigger="command", actor="test", now=NOW)


def test_an_old_terminal_run_goes_with_everything_it_owns(world: World) -> None:
    old = world.run(status="succeeded")
    world.effect(old, status="succeeded")
    world.interrupt(old, status="resolved")
    young = world.run(status="succeeded", age=timedelta(days=1))
    report = apply(policy(world, runs_max_age_seconds=30 * DAY))
    assert not exists(Run, old)
    assert exists(Run, young)
    assert not RunEvent.objects.filter(run_id=old.id).exists()
    assert not Checkpoint.objects.filter(run_id=old.id).exists()
    assert not EffectRecord.objects.unscoped().filter(run_id=old.id).exists()
    assert not Interrupt.objects.unscoped().filter(run_id=old.id).exists()
    assert report.removed["runs"]["count"] == 1
    assert report.removed["events"]["count"] == 5
    assert report.removed["checkpoints"]["count"] == 5
    assert report.removed["effects"]["count"] == 1
    assert report.removed["interrupts"]["count"] == 1
    assert RunEvent.objects.filter(run_id=young.id).count() == 5
    log = RetentionPass.objects.unscoped().get()
    assert log.removed["runs"] == 1
    assert log.complete
    audit = AuditEvent.objects.filter(action="retention.pass").get()
    assert audit.details["removed"]["runs"] == 1


def test_keep_last_keeps_the_newest_runs(world: World) -> None:
    runs = [world.run(age=timedelta(days=10 - i)) for i in range(5)]
    apply(policy(world, runs_keep_last=2))
    assert [exists(Run, r) for r in runs] == [False, False, False, True, True]


@pytest.mark.parametrize("status", ["queued", "running", "waiting", "needs_review"])
def test_a_run_that_is_not_terminal_stays(world: World, status: str) -> None:
    run = world.run(status=status)
    report = apply(policy(world, runs_max_age_seconds=DAY))
    assert exists(Run, run)
    assert RunEvent.objects.filter(run_id=run.id).count() == 5
    assert report.protected == {"run_not_terminal": 1}


def test_a_run_with_a_pending_interrupt_stays(world: World) -> None:
    run = world.run(status="cancelled")
    world.interrupt(run, status="pending")
    apply(policy(world, runs_max_age_seconds=DAY))
    assert exists(Run, run)


@pytest.mark.parametrize("status", ["needs_review", "started", "prepared"])
def test_a_run_with_an_unresolved_effect_stays_with_its_evidence(world: World, status: str) -> None:
    run = world.run(status="failed")
    effect = world.effect(run, status=status)
    apply(policy(world, runs_max_age_seconds=DAY))
    assert exists(Run, run)
    assert exists(EffectRecord, effect)


def test_a_fork_parent_of_a_kept_run_stays(world: World) -> None:
    parent = world.run(status="succeeded")
    child = world.run(status="succeeded", forked_from=parent, age=timedelta(days=1))
    report = apply(policy(world, runs_max_age_seconds=30 * DAY))
    assert exists(Run, parent)
    assert exists(Run, child)
    assert RunFork.objects.unscoped().filter(parent=parent, child=child).exists()
    assert report.protected == {"run_fork_parent": 1}


def test_a_replay_source_of_a_kept_replay_stays(world: World) -> None:
    source = world.run(status="succeeded")
    replay = world.run(status="succeeded", replay_of=source, age=timedelta(days=1))
    apply(policy(world, runs_max_age_seconds=30 * DAY))
    assert exists(Run, source)
    assert exists(Run, replay)


def test_a_fork_and_its_parent_go_together_when_both_expire(world: World) -> None:
    parent = world.run(status="succeeded")
    child = world.run(status="succeeded", forked_from=parent)
    replay = world.run(status="succeeded", replay_of=child)
    apply(policy(world, runs_max_age_seconds=DAY))
    assert not any(exists(Run, r) for r in (parent, child, replay))
    assert not RunFork.objects.unscoped().exists()


def test_a_branch_run_stays_while_its_family_has_an_active_member(world: World) -> None:
    root = world.run(status="waiting")
    branch = world.run(status="succeeded", parent=root)
    apply(policy(world, runs_max_age_seconds=DAY))
    assert exists(Run, root)
    assert exists(Run, branch)


def test_a_finished_family_goes_whole(world: World) -> None:
    root = world.run(status="succeeded")
    branches = [world.run(status="succeeded", parent=root) for _ in range(3)]
    apply(policy(world, runs_max_age_seconds=DAY))
    assert not exists(Run, root)
    assert not any(exists(Run, b) for b in branches)


def test_an_ancestor_of_a_kept_session_stays_through_its_base_chain(world: World) -> None:
    root = world.session(chunks=3)
    middle = world.fork(root, chunks=2)
    leaf = world.fork(middle, at=4, chunks=2, age=timedelta(days=1))
    before = snapshot(world.project)
    report = apply(policy(world, sessions_max_age_seconds=30 * DAY))
    assert exists(Session, root)
    assert exists(Session, middle)
    assert exists(Session, leaf)
    assert report.protected == {"session_ancestor": 2}
    assert_kept_readable(before, world.project)


def test_a_branch_point_stays_and_its_old_branches_go(world: World) -> None:
    point = world.session(chunks=2)
    kept_branch = world.fork(point, age=timedelta(days=1))
    old_branch = world.fork(point)
    old_leaf = world.fork(old_branch)
    apply(policy(world, sessions_max_age_seconds=30 * DAY))
    assert exists(Session, point)
    assert exists(Session, kept_branch)
    assert not exists(Session, old_branch)
    assert not exists(Session, old_leaf)
    assert not Chunk.objects.unscoped().filter(session_id__in=[old_branch.id, old_leaf.id]).exists()
    assert not LineageEdge.objects.unscoped().filter(child_id=old_branch.id).exists()


def test_a_merge_keeps_all_its_parents(world: World) -> None:
    from sessions_app import services as session_services

    left, right = world.session(), world.session()
    merged = session_services.session_merge(sessions=[left, right], strategy="concat")
    world.age_session(merged, timedelta(days=1))
    apply(policy(world, sessions_max_age_seconds=30 * DAY))
    assert exists(Session, left)
    assert exists(Session, right)
    assert exists(Session, merged)


def test_the_working_session_of_an_active_run_stays(world: World) -> None:
    base = world.session()
    working = world.fork(base)
    run = world.run(status="running", session=working)
    apply(policy(world, sessions_max_age_seconds=DAY, runs_max_age_seconds=DAY))
    assert exists(Run, run)
    assert exists(Session, working)
    assert exists(Session, base)


def test_a_session_goes_after_its_old_run(world: World) -> None:
    working = world.session()
    run = world.run(status="succeeded", session=working)
    apply(policy(world, sessions_max_age_seconds=DAY, runs_max_age_seconds=DAY))
    assert not exists(Run, run)
    assert not exists(Session, working)


def test_a_session_a_memory_entry_points_at_stays(world: World) -> None:
    from memory_app.models import MemoryEntry

    session = world.session()
    MemoryEntry.objects.create(
        tenant_id=world.project.tenant_id,
        project=world.project,
        scope="session",
        session=session,
        text="remember this",
        fingerprint="1" * 64,
    )
    report = apply(policy(world, sessions_max_age_seconds=DAY))
    assert exists(Session, session)
    assert report.protected == {"session_pinned": 1}


def test_audit_rows_are_never_removed(world: World) -> None:
    from openrath_project.tenancy.services import audit_record

    audit_record(actor="x", action="run.create", outcome="success", tenant=world.project.tenant)
    world.run()
    apply(policy(world, runs_max_age_seconds=DAY))
    assert AuditEvent.objects.filter(action="run.create").count() == 1


def test_a_dry_run_changes_nothing_and_reports_what_would_go(world: World) -> None:
    session = world.session(chunks=4)
    run = world.run(session=session)
    pol = policy(world, runs_max_age_seconds=DAY, sessions_max_age_seconds=DAY)
    report = services.retention_dry_run(policy=pol, now=NOW)
    assert exists(Run, run)
    assert exists(Session, session)
    assert report.removed["runs"]["count"] == 1
    assert report.removed["events"]["count"] == 5
    assert report.removed["checkpoints"]["count"] == 5
    assert report.removed["sessions"]["count"] == 1
    assert report.removed["chunks"]["count"] == 4
    assert report.removed["runs"]["bytes"] > 0
    assert report.removed["chunks"]["bytes"] > 0
    assert report.sample == {"runs": [str(run.id)], "sessions": [str(session.id)]}
    assert not RetentionPass.objects.unscoped().exists()
    applied = apply(pol)
    assert {k: v["count"] for k, v in applied.removed.items() if v["count"]} == {
        k: v["count"] for k, v in report.removed.items() if v["count"]
    }


def test_pruned_checkpoints_leave_every_kept_one_rebuildable(world: World) -> None:
    run = world.run(steps=9)
    before = snapshot(world.project)
    report = apply(policy(world, checkpoints_keep_last=3, events_keep_last=2))
    assert list(Checkpoint.objects.filter(run=run).values_list("seq", "full")) == [
        (7, True),
        (8, False),
        (9, False),
    ]
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [8, 9]
    assert report.compacted == 1
    assert_kept_readable(before, world.project)


def test_checkpoints_of_a_fork_parent_are_not_pruned(world: World) -> None:
    parent = world.run(steps=6)
    world.run(forked_from=parent)
    apply(policy(world, checkpoints_keep_last=1, events_keep_last=1))
    assert Checkpoint.objects.filter(run=parent).count() == 6
    assert RunEvent.objects.filter(run=parent).count() == 6


def test_checkpoints_of_an_active_run_are_not_pruned(world: World) -> None:
    run = world.run(status="waiting", steps=6)
    apply(policy(world, checkpoints_max_age_seconds=DAY, events_max_age_seconds=DAY))
    assert Checkpoint.objects.filter(run=run).count() == 6


def test_age_limits_keep_the_last_event_and_checkpoint(world: World) -> None:
    run = world.run(steps=4)
    before = snapshot(world.project)
    apply(policy(world, checkpoints_max_age_seconds=DAY, events_max_age_seconds=DAY))
    assert list(Checkpoint.objects.filter(run=run).values_list("seq", "full")) == [(4, True)]
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [4]
    assert_kept_readable(before, world.project)


def test_a_batch_rechecks_what_changed_after_planning(world: World) -> None:
    run = world.run(status="succeeded")
    pol = policy(world, runs_max_age_seconds=DAY)
    plan, graph = services.retention_plan(policy=pol, now=NOW)
    assert plan.runs == [str(run.id)]
    world.interrupt(run, status="pending")  # arrives between the plan and the batch
    counts, dropped = services._delete_run_batch(plan.runs, {str(run.id): [str(run.id)]})
    assert dropped == 1
    assert counts == {}
    assert exists(Run, run)
