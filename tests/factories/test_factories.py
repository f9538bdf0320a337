"""The factories make what the code under test would find: service-made rows with their
side rows, runs in each status the database accepts, digests that match their requests."""

from __future__ import annotations

import pytest

from memory_app.models import MemoryStats, MemoryTerm
from openrath_project.jsontext import digest
from runs_app.models import RunEvent
from runs_app.transitions import STATUSES, TERMINAL
from sessions_app.selectors import chunk_all
from tests.factories.effects import EffectRecordFactory
from tests.factories.memory import MemoryEntryFactory
from tests.factories.runs import CheckpointFactory, InterruptFactory, RunFactory
from tests.factories.sessions import ChunkFactory, SessionFactory

pytestmark = pytest.mark.django_db


def test_sessions_and_chunks_come_from_the_session_services(project):
    session = SessionFactory(project=project, messages=["hello", "there"])
    assert (session.tenant_id, session.own_len, session.created_by) == (
        project.tenant_id,
        2,
        "flow",
    )
    chunk = ChunkFactory(session=session, role="assistant", content={"text": "hi"})
    assert chunk.seq == 2
    assert [c.content["text"] for c in chunk_all(session.id)] == ["hello", "there", "hi"]


def test_a_service_made_row_cannot_be_built_unsaved(project):
    with pytest.raises(TypeError, match="SessionFactory makes its rows through a service"):
        SessionFactory.build(project=project)


@pytest.mark.parametrize("status", STATUSES)
def test_runs_in_every_status(project, status):
    run = RunFactory(project=project, status=status)
    run.refresh_from_db()
    assert (run.status, run.workflow, run.project_id) == (status, "factory_workflow", project.id)
    assert list(RunEvent.objects.filter(run=run).values_list("type", flat=True)) == ["run.created"]
    assert (run.lease_expires_at is not None) == (status == "running")
    assert (run.finished_at is not None) == (status in TERMINAL)


def test_an_unknown_status_is_refused(project):
    with pytest.raises(ValueError, match="unknown run status 'lost'"):
        RunFactory(project=project, status="lost")


def test_interrupts_checkpoints_and_effects_belong_to_their_run(project):
    interrupt = InterruptFactory(run__project=project)
    assert (interrupt.run.status, interrupt.status, interrupt.project_id) == (
        "waiting",
        "pending",
        project.id,
    )
    assert interrupt.request_digest == digest(interrupt.request)
    checkpoint = CheckpointFactory(run=interrupt.run, state={"n": 1})
    assert (checkpoint.state_digest, checkpoint.session_id) == (
        digest({"n": 1}),
        interrupt.run.session_id,
    )
    effect = EffectRecordFactory(run__project=project)
    assert (effect.run.status, effect.status, effect.tenant_id) == (
        "needs_review",
        "needs_review",
        project.tenant_id,
    )
    assert effect.request_digest == digest(effect.request)


def test_memory_entries_are_remembered_with_their_postings(project):
    entry = MemoryEntryFactory(project=project, text="Backups run nightly.")
    assert MemoryTerm.objects.filter(entry=entry).count() == entry.term_count == 3
    assert MemoryStats.objects.get(project=project).entries == 1
    assert MemoryEntryFactory(project=project, text="backups run NIGHTLY.") == entry
