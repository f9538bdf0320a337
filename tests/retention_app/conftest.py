"""Fixtures for retention tests: the test workflow's registry, a world builder writing real
rows (sessions through the sessions services; runs, checkpoints and events as the engine
stores them), and a reader that checks every kept object can still be fully read."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from effects_app.models import EffectRecord
from openrath_project.jsontext import digest
from openrath_project.tenancy.models import Project
from runs_app import registration
from runs_app.models import Checkpoint, Interrupt, Run, RunEvent, RunFork, WorkflowPlan
from runs_app.registry import WorkflowRegistry
from runs_app.services.checkpoints import run_state_at
from runs_app.state_delta import diff
from sessions_app import selectors as session_selectors
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Session
from tests.retention_app import workflows

#: The clock of the tests that give ``now`` explicitly: far after every row's creation.
NOW = datetime.now(UTC) + timedelta(days=400)
OLD = timedelta(days=300)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([workflows.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    return fresh


def _drafts(n: int, label: str) -> list[Any]:
    return [
        make_draft(role="user" if i % 2 == 0 else "assistant", content={"text": f"{label} {i}"})
        for i in range(n)
    ]


class World:
    """Builds sessions and runs in one project; ages rows by moving their times back."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.plan, _ = WorkflowPlan.objects.get_or_create(
            hash="f" * 64, defaults={"name": "retention-rows", "definition": {}, "graph": {}}
        )

    def session(self, chunks: int = 2, *, age: timedelta = OLD) -> Session:
        made = session_services.session_create(
            project=self.project, chunks=_drafts(chunks, "root"), created_by="test"
        )
        self.age_session(made, age)
        return made

    def fork(
        self, parent: Session, *, at: int | None = None, chunks: int = 1, age: timedelta = OLD
    ) -> Session:
        child = session_services.session_fork(session=parent, at=at, created_by="test")
        if chunks:
            session_services.chunks_append(session=child, drafts=_drafts(chunks, "fork"))
        self.age_session(child, age)
        return child

    def age_session(self, session: Session, age: timedelta) -> None:
        when = NOW - age
        Session.objects.unscoped().filter(id=session.id).update(created_at=when, updated_at=when)

    def run(
        self,
        *,
        status: str = "succeeded",
        session: Session | None = None,
        parent: Run | None = None,
        forked_from: Run | None = None,
        replay_of: Run | None = None,
        steps: int = 5,
        age: timedelta = OLD,
    ) -> Run:
        """A run with ``steps`` checkpoints (the first whole, then deltas) and their events,
        as the engine writes them."""
        when = NOW - age
        run = Run.objects.create(
            tenant_id=self.project.tenant_id,
            project=self.project,
            workflow="retention-rows",
            plan=self.plan,
            status=status,
            input={"n": 0},
            session=session,
            parent=parent,
            kind="replay" if replay_of else "run",
            replay_of=replay_of,
            lease_expires_at=when + timedelta(minutes=5) if status == "running" else None,
        )
        state: dict[str, Any] = {"n": 0, "items": []}
        previous = state
        for seq in range(1, steps + 1):
            state = {"n": seq, "items": [*previous["items"], f"item {seq}"]}
            Checkpoint.objects.create(
                run=run,
                seq=seq,
                step=f"s{seq}",
                full=seq == 1,
                state=state if seq == 1 else diff(previous, state),
                state_digest=digest(state),
                session_id=session.id if session else None,
                session_len=session.length if session else 0,
                fencing_token=1,
            )
            RunEvent.objects.create(run=run, seq=seq, type="step.completed", step=f"s{seq}")
            previous = state
        terminal = status in ("succeeded", "failed", "cancelled", "timed_out")
        Run.objects.unscoped().filter(id=run.id).update(
            checkpoint_seq=steps,
            event_seq=steps,
            state=state,
            state_seq=steps,
            created_at=when,
            updated_at=when,
            finished_at=when if terminal else None,
        )
        Checkpoint.objects.filter(run=run).update(created_at=when)
        RunEvent.objects.filter(run=run).update(created_at=when)
        if forked_from is not None:
            RunFork.objects.create(
                tenant_id=self.project.tenant_id,
                project=self.project,
                parent=forked_from,
                child=run,
                checkpoint_seq=1,
            )
        run.refresh_from_db()
        return run

    def interrupt(self, run: Run, *, status: str = "pending") -> Interrupt:
        return Interrupt.objects.create(
            tenant_id=self.project.tenant_id,
            project=self.project,
            run=run,
            step="s1",
            checkpoint_seq=1,
            sequence=Interrupt.objects.filter(run=run).count(),
            kind="approval",
            request={"q": "ok?"},
            request_digest="0" * 64,
            status=status,
        )

    def effect(self, run: Run, *, status: str) -> EffectRecord:
        key = uuid.uuid4().hex
        return EffectRecord.objects.create(
            tenant_id=self.project.tenant_id,
            project=self.project,
            run=run,
            step="s1",
            key=key,
            idempotency_key=key,
            request={"fn": "send"},
            request_digest="0" * 64,
            status=status,
        )


@pytest.fixture
def world(project: Project) -> World:
    return World(project)


def exists(model: type, obj: Any) -> bool:
    return bool(model.objects.unscoped().filter(id=obj.id).exists())


Snapshot = dict[str, Any]


def snapshot(project: Project) -> Snapshot:
    """Every session's logical chunks and every run's state at each of its checkpoints."""
    out: Snapshot = {"sessions": {}, "runs": {}}
    for session in Session.objects.unscoped().filter(project=project):
        chunks = session_selectors.chunk_all(session.id)
        out["sessions"][str(session.id)] = [(c.seq, c.content) for c in chunks]
    for run in Run.objects.unscoped().filter(project=project):
        seqs = Checkpoint.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)
        out["runs"][str(run.id)] = {seq: run_state_at(run, seq) for seq in seqs}
    return out


def assert_kept_readable(before: Snapshot, project: Project) -> None:
    """Every session still there reads exactly as before (its whole chain), and every kept
    checkpoint of every run still there rebuilds to the state it had."""
    after = snapshot(project)
    for session_id, chunks in after["sessions"].items():
        assert chunks == before["sessions"][session_id], session_id
        expected = Session.objects.unscoped().get(id=session_id).length
        assert len(chunks) == expected
    for run_id, states in after["runs"].items():
        for seq, state in states.items():
            assert state == before["runs"][run_id][seq], (run_id, seq)


MakeWorld = Callable[[], World]


@pytest.fixture(autouse=True)
def _foreign_keys_checked(request: pytest.FixtureRequest) -> Any:
    """Foreign keys are checked at commit, which a test's transaction never reaches: check
    them at the end of every test that used the database (a pass must leave none dangling)."""
    yield
    if "db" not in request.fixturenames and "world" not in request.fixturenames:
        return
    check_foreign_keys()


def check_foreign_keys() -> None:
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
    else:
        connection.check_constraints()
