"""A property over random lineage graphs (forks of forks, merges, runs on sessions, active and
terminal runs, branch runs, forks and replays of runs, pending interrupts, unresolved effects,
random limits): after a pass every kept object reads exactly as before, nothing protected is
gone, nothing the limits keep is gone, and no foreign key dangles."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from openrath_project.tenancy.models import Project
from retention_app import services
from retention_app.planning import TERMINAL_STATUSES
from runs_app.models import Run
from sessions_app import services as session_services
from sessions_app.models import LineageEdge, Session
from tests.retention_app.conftest import (
    NOW,
    World,
    assert_kept_readable,
    check_foreign_keys,
    snapshot,
)

pytestmark = pytest.mark.django_db

STATUSES = [
    *("succeeded", "failed", "cancelled", "timed_out") * 3,
    *("queued", "running", "waiting", "needs_review"),
]
AGES = [timedelta(days=d) for d in (1, 20, 100, 300)]

session_op = st.tuples(
    st.sampled_from(["root", "fork", "fork", "merge"]),
    st.integers(0, 50),  # which earlier session(s)
    st.integers(0, 50),
    st.integers(0, 2),  # chunks of its own
    st.sampled_from(AGES),
)
run_op = st.tuples(
    st.sampled_from(STATUSES),
    st.integers(-1, 50),  # session (-1: none)
    st.sampled_from(["plain", "plain", "branch", "fork", "replay"]),
    st.integers(0, 50),  # which earlier run
    st.sampled_from(["none"] * 8 + ["interrupt", "effect"]),
    st.sampled_from(AGES),
    st.integers(1, 6),  # checkpoints
)
limit_age = st.one_of(st.none(), st.sampled_from([10, 50, 200, 200]).map(lambda d: d * 86400))
limit_count = st.one_of(st.none(), st.integers(0, 6))
small_count = st.one_of(st.none(), st.integers(1, 4))


class Done(Exception):
    """Rolls an example's rows back."""


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sessions=st.lists(session_op, min_size=1, max_size=12),
    runs=st.lists(run_op, max_size=10),
    limits=st.fixed_dictionaries(
        {
            "runs_max_age_seconds": limit_age,
            "runs_keep_last": limit_count,
            "sessions_max_age_seconds": limit_age,
            "sessions_keep_last": limit_count,
            "events_max_age_seconds": limit_age,
            "events_keep_last": small_count,
            "checkpoints_max_age_seconds": limit_age,
            "checkpoints_keep_last": small_count,
        }
    ),
)
def test_a_pass_keeps_what_kept_objects_need(
    project: Project, sessions: list[Any], runs: list[Any], limits: dict[str, Any]
) -> None:
    try:
        with transaction.atomic():
            _example(World(project), sessions, runs, limits)
            raise Done
    except Done:
        pass


def _example(
    world: World, session_ops: list[Any], run_ops: list[Any], limits: dict[str, Any]
) -> None:
    made: list[Session] = []
    for op, a, b, chunks, age in session_ops:
        if op == "root" or not made:
            made.append(world.session(chunks=chunks, age=age))
        elif op == "fork":
            parent = made[a % len(made)]
            parent.refresh_from_db()
            at = min(parent.length, b % (parent.length + 1))
            made.append(world.fork(parent, at=at, chunks=chunks, age=age))
        else:
            left, right = made[a % len(made)], made[b % len(made)]
            if left.id == right.id:
                made.append(world.fork(left, chunks=chunks, age=age))
                continue
            merged = session_services.session_merge(sessions=[left, right], strategy="concat")
            world.age_session(merged, age)
            made.append(merged)
    made_runs: list[Run] = []
    for status, s_index, kind, r_index, pin, age, steps in run_ops:
        session = made[s_index % len(made)] if s_index >= 0 else None
        if session is not None:
            session.refresh_from_db()
        other = made_runs[r_index % len(made_runs)] if made_runs else None
        run = world.run(
            status=status,
            session=session,
            parent=other if kind == "branch" else None,
            forked_from=other if kind == "fork" else None,
            replay_of=other if kind == "replay" else None,
            steps=steps,
            age=age,
        )
        if pin == "interrupt":
            world.interrupt(run, status="pending")
        elif pin == "effect":
            world.effect(run, status="needs_review")
        made_runs.append(run)

    before = snapshot(world.project)
    parents = {
        str(s.id): {str(s.base_id)} if s.base_id else set()
        for s in Session.objects.unscoped().filter(project=world.project)
    }
    for parent, child in LineageEdge.objects.unscoped().values_list("parent_id", "child_id"):
        parents[str(child)].add(str(parent))
    run_rows = {str(r.id): r for r in Run.objects.unscoped().filter(project=world.project)}
    pinned = {str(r.id) for r in made_runs if r.interrupts.exists() or r.effects.exists()}

    policy = services.policy_create(project=world.project, created_by="test", **limits)
    services.retention_apply(policy=policy, trigger="command", actor="test", now=NOW)

    check_foreign_keys()
    assert_kept_readable(before, world.project)
    kept_sessions = {
        str(s)
        for s in Session.objects.unscoped()
        .filter(project=world.project)
        .values_list("id", flat=True)
    }
    kept_runs = {
        str(r)
        for r in Run.objects.unscoped().filter(project=world.project).values_list("id", flat=True)
    }
    event(f"runs removed: {len(run_rows) > len(kept_runs)}")
    event(f"sessions removed: {len(parents) > len(kept_sessions)}")
    for session_id in kept_sessions:  # ancestors and branch points of kept sessions stay
        assert parents[session_id] <= kept_sessions, session_id
    if limits["sessions_max_age_seconds"] is None and limits["sessions_keep_last"] is None:
        assert kept_sessions == set(parents)
    for run_id, run in run_rows.items():
        if run.status not in TERMINAL_STATUSES or run_id in pinned:
            assert run_id in kept_runs, (run_id, run.status)
    for run_id in kept_runs:
        run = run_rows[run_id]
        sources = [run.parent_id, run.replay_of_id]
        fork = run.forked_from if hasattr(run, "forked_from") else None
        if fork is not None:
            sources.append(fork.parent_id)
        assert {str(s) for s in sources if s} <= kept_runs, run_id
        for session_id in (run.session_id,):
            if session_id is not None:
                assert str(session_id) in kept_sessions
    if limits["runs_max_age_seconds"] is None and limits["runs_keep_last"] is None:
        assert kept_runs == set(run_rows)
    for run_id in set(run_rows) - kept_runs:  # only what the limits expired went
        assert run_rows[run_id].status in TERMINAL_STATUSES
        age_limit = limits["runs_max_age_seconds"]
        if limits["runs_keep_last"] is None:
            assert age_limit is not None
            assert run_rows[run_id].created_at < NOW - timedelta(seconds=age_limit)
