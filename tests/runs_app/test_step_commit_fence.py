"""The step commit's session fence (issue 20, rows read per step): the writer check and the
session's new length come from the append itself, and a commit whose append is not the lease's,
or does not end where the worker expects, writes nothing at all, on both commit paths.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from runs_app import services
from runs_app.models import Checkpoint, Run, RunEvent
from runs_app.services import composed as composed_path
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Chunk, Session
from tests.support import require_postgres

pytestmark = pytest.mark.django_db(transaction=True)

PATHS = pytest.mark.parametrize("composed", [True, False], ids=["composed", "portable"])


def _path(composed: bool, monkeypatch: Any) -> None:
    if composed:
        require_postgres()
    else:
        monkeypatch.setattr(composed_path, "composed_sql", lambda: False)


def _claimed(registry: Any, project: Any) -> tuple[Run, services.Claim]:
    run, _ = services.run_create(project=project, workflow=registry.get("linear"), state={})
    claim = services.lease_claim(worker="w", run_id=run.id)
    assert claim is not None
    assert claim.session_length == 0  # the claim took the session's writer
    return run, claim


def _commit(chunks: int, session_len: int | None = None) -> services.StepCommit:
    return services.StepCommit(
        step="one",
        state={"a": 1},
        previous_state={},
        next_nodes=["two"],
        attempt=1,
        chunks=[make_draft(role="assistant", content={"text": f"c{i}"}) for i in range(chunks)],
        session_len=session_len,
    )


def _session_id(run: Run) -> uuid.UUID:
    assert run.session_id is not None
    return run.session_id


def _written(run: Run) -> dict[str, Any]:
    """What a commit could have written for ``run``."""
    row = Run.objects.get(id=run.id)
    session = Session.objects.get(id=_session_id(run))
    return {
        "run": (row.checkpoint_seq, row.event_seq, row.session_len, row.next_nodes),
        "checkpoints": Checkpoint.objects.filter(run=run).count(),
        "events": RunEvent.objects.filter(run=run).count(),
        "chunks": Chunk.objects.filter(session_id=_session_id(run)).count(),
        "session": (session.own_len, session.updated_at),
    }


@PATHS
@pytest.mark.parametrize("writer", ["other run", "newer token", "released"])
def test_a_commit_with_chunks_whose_session_is_not_the_leases_writes_nothing(
    registry, project, monkeypatch, composed, writer
):
    _path(composed, monkeypatch)
    run, claim = _claimed(registry, project)
    session = Session.objects.filter(id=_session_id(run))
    if writer == "other run":
        session.update(writer_run_id=uuid.uuid4(), writer_token=claim.token)
    elif writer == "newer token":
        session.update(writer_token=claim.token + 1)
    else:
        session.update(writer_run_id=None, writer_token=None)
    before = _written(run)

    with pytest.raises(services.StaleLease):
        services.checkpoint_commit(claim=claim, commit=_commit(2), checkpoint_seq=0)
    assert _written(run) == before

    # Without chunks the session's writer does not matter: the step commits.
    assert services.checkpoint_commit(claim=claim, commit=_commit(0), checkpoint_seq=0) == 1


@PATHS
def test_a_commit_records_the_length_its_append_ended_at(registry, project, monkeypatch, composed):
    _path(composed, monkeypatch)
    run, claim = _claimed(registry, project)

    assert services.checkpoint_commit(claim=claim, commit=_commit(2), checkpoint_seq=0) == 1
    # The worker's own expectation, when it gives one, must be where the append ends.
    before = _written(run)
    with pytest.raises(services.StaleLease):
        services.checkpoint_commit(claim=claim, commit=_commit(1, session_len=4), checkpoint_seq=1)
    assert _written(run) == before
    assert (
        services.checkpoint_commit(claim=claim, commit=_commit(1, session_len=3), checkpoint_seq=1)
        == 2
    )

    checkpoints = list(Checkpoint.objects.filter(run=run).order_by("seq"))
    assert [c.session_len for c in checkpoints] == [2, 3]
    assert Run.objects.get(id=run.id).session_len == 3
    assert Session.objects.get(id=_session_id(run)).length == 3
    seqs = Chunk.objects.filter(session_id=_session_id(run)).values_list("seq", flat=True)
    assert sorted(seqs) == [0, 1, 2]


@PATHS
def test_a_stale_token_writes_nothing_even_while_the_session_still_names_it(
    registry, project, monkeypatch, composed
):
    """The run moved on (here: a newer claim's token on the run row alone) while the session's
    writer still names the old lease: the run's fence refuses the commit and its append too."""
    _path(composed, monkeypatch)
    run, claim = _claimed(registry, project)
    Run.objects.filter(id=run.id).update(fencing_token=claim.token + 1)
    before = _written(run)
    with pytest.raises(services.StaleLease):
        services.checkpoint_commit(claim=claim, commit=_commit(1), checkpoint_seq=0)
    assert _written(run) == before
