"""Comparing runs of one fork lineage: ``run_compare`` and ``GET /api/v1/runs/{a}/compare/{b}/``.

The lineage is built with ``run_fork``. A run of ``compare_steps`` checkpoints after
each of its four steps (one chunk each; steps two and four record an effect keyed by the run's
tag), so checkpoint ``k`` of a run started from scratch is "after the k-th step".
"""

from __future__ import annotations

from typing import Any

import pytest

from effects_app.models import EffectRecord
from openrath_project.errors import Conflict
from openrath_project.tenancy.models import Project
from runs_app import registration
from runs_app import services as run_services
from runs_app.models import Checkpoint, Run, RunFork
from runs_app.registry import WorkflowRegistry
from runs_app.services.compare import run_compare
from runs_app.services.forks import run_fork
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import compare_flows

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def registry(monkeypatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([compare_flows.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    compare_flows.NOTES.clear()
    return fresh


def start(registry: WorkflowRegistry, project: Project, **state: Any) -> Run:
    run, _ = run_services.run_create(
        project=project, workflow=registry.get("compare_steps"), state={"tag": "main", **state}
    )
    return drive(registry, run.id)


def checkpoint_after(run: Run, step: str) -> int:
    return Checkpoint.objects.get(run=run, step=step).seq


def fork(registry: WorkflowRegistry, parent: Run, seq: int, tag: str) -> Run:
    """A fork of ``parent`` at checkpoint ``seq`` with ``{"tag": tag}`` merged into its state,
    executed to its end."""
    child = run_fork(
        run=parent,
        checkpoint_seq=seq,
        state_patch={"tag": tag},
        reason=f"try {tag}",
        actor="test",
        registry=registry,
    )
    return drive(registry, child.id)


def texts(chunks) -> list[str]:
    return [c.content["text"] for c in chunks]


def notes(effects) -> list[tuple[str, str]]:
    return [(str(e.run_id), e.request["args"][0]) for e in effects]


# --- The service ---------------------------------------------------------------------------------


def test_parent_and_fork(registry, project):
    parent = start(registry, project)
    assert parent.status == "succeeded"
    child = fork(registry, parent, 2, "f")
    assert child.status == "succeeded"

    result = run_compare(parent, child)
    assert result.common_run.id == parent.id
    assert result.common_checkpoint == 2
    assert result.common_length == 2
    assert result.generations == 1
    assert result.a.branch_checkpoint is None
    assert result.b.branch_checkpoint == 2
    # The parent's history after the branch point is not the child's; the child's own is.
    assert [s.as_dict() for s in result.a.timeline] == [
        {"run": str(parent.id), "from_checkpoint": 2, "until_checkpoint": None},
    ]
    assert [s.as_dict() for s in result.b.timeline] == [
        {"run": str(child.id), "from_checkpoint": 2, "until_checkpoint": None},
    ]
    # After the shared prefix ("one main", "two main"), each side's own chunks.
    assert texts(result.a.chunks) == ["three main", "four main"]
    assert texts(result.b.chunks) == ["three f", "four f"]
    assert result.a.chunks_from == result.b.chunks_from == 2
    assert result.a.chunks_more == result.b.chunks_more == 0
    # The parent's step-two effect happened before the branch point: in both timelines.
    assert notes(result.a.effects) == [(str(parent.id), "four:main")]
    assert notes(result.b.effects) == [(str(child.id), "four:f")]
    assert result.state_diff == [
        {"op": "replace", "path": "/tag", "old": "main", "new": "f"},
        {"op": "replace", "path": "/receipts/1", "old": "four:main", "new": "four:f"},
    ]
    # Reversed: the same common point, the diff the other way.
    back = run_compare(child, parent)
    assert (back.common_run.id, back.common_checkpoint) == (parent.id, 2)
    assert back.state_diff[0] == {"op": "replace", "path": "/tag", "old": "f", "new": "main"}


def test_sibling_forks_share_the_parent_up_to_the_earlier_branch_point(registry, project):
    parent = start(registry, project)
    early = fork(registry, parent, 1, "early")
    late = fork(registry, parent, 3, "late")

    result = run_compare(early, late)
    assert result.common_run.id == parent.id
    assert result.common_checkpoint == 1
    assert result.common_length == 1
    assert result.generations == 2
    assert (result.a.branch_checkpoint, result.b.branch_checkpoint) == (1, 3)
    assert texts(result.a.chunks) == ["two early", "three early", "four early"]
    # The late fork lived the parent's steps two and three before it was forked.
    assert texts(result.b.chunks) == ["two main", "three main", "four late"]
    assert notes(result.a.effects) == [
        (str(early.id), "two:early"),
        (str(early.id), "four:early"),
    ]
    assert notes(result.b.effects) == [(str(parent.id), "two:main"), (str(late.id), "four:late")]
    assert [s.as_dict() for s in result.b.timeline] == [
        {"run": str(parent.id), "from_checkpoint": 1, "until_checkpoint": 3},
        {"run": str(late.id), "from_checkpoint": 3, "until_checkpoint": None},
    ]


def test_three_generations(registry, project):
    parent = start(registry, project)
    child = fork(registry, parent, 1, "child")
    grandchild = fork(registry, child, checkpoint_after(child, "two"), "grand")
    assert grandchild.status == "succeeded"

    result = run_compare(parent, grandchild)
    assert result.common_run.id == parent.id
    assert result.common_checkpoint == 1
    assert result.generations == 2
    assert texts(result.a.chunks) == ["two main", "three main", "four main"]
    assert texts(result.b.chunks) == ["two child", "three grand", "four grand"]
    # The grandchild's timeline: the child's step two (before the grandchild was forked from
    # it), then the grandchild's own step four; never the child's step four.
    assert notes(result.b.effects) == [
        (str(child.id), "two:child"),
        (str(grandchild.id), "four:grand"),
    ]
    assert notes(result.a.effects) == [(str(parent.id), "two:main"), (str(parent.id), "four:main")]

    # The child against its own fork: the common run is the child.
    inner = run_compare(child, grandchild)
    assert inner.common_run.id == child.id
    assert inner.common_checkpoint == checkpoint_after(child, "two")
    assert inner.generations == 1
    assert notes(inner.a.effects) == [(str(child.id), "four:child")]
    assert notes(inner.b.effects) == [(str(grandchild.id), "four:grand")]


def test_fork_of_a_fork_before_its_branch_point(registry, project):
    parent = start(registry, project)
    child = fork(registry, parent, 2, "child")
    # Checkpoint 1 of the child is its parent's: this fork shares only the parent's history.
    cousin = fork(registry, child, 1, "cousin")
    assert cousin.status == "succeeded"

    result = run_compare(child, cousin)
    assert result.common_run.id == child.id
    assert result.common_checkpoint == 1
    assert result.b.branch_checkpoint == 1
    assert texts(result.a.chunks) == ["two main", "three child", "four child"]
    assert texts(result.b.chunks) == ["two cousin", "three cousin", "four cousin"]
    # The child's side: the parent's step two (after checkpoint 1), then the child's own.
    assert notes(result.a.effects) == [(str(parent.id), "two:main"), (str(child.id), "four:child")]
    assert notes(result.b.effects) == [
        (str(cousin.id), "two:cousin"),
        (str(cousin.id), "four:cousin"),
    ]


def test_fork_at_the_start(registry, project):
    parent = start(registry, project)
    child = fork(registry, parent, 0, "zero")
    result = run_compare(parent, child)
    assert (result.common_checkpoint, result.common_length) == (0, 0)
    assert texts(result.b.chunks) == ["one zero", "two zero", "three zero", "four zero"]
    assert len(result.a.effects) == 2
    assert notes(result.b.effects) == [(str(child.id), "two:zero"), (str(child.id), "four:zero")]


def test_a_run_with_itself(registry, project):
    parent = start(registry, project)
    result = run_compare(parent, parent)
    assert result.common_checkpoint == parent.checkpoint_seq
    assert result.state_diff == []
    assert result.a.chunks == result.b.chunks == []
    assert result.a.effects == result.b.effects == []


def test_unrelated_runs_have_no_common_ancestor(registry, project):
    one, other = start(registry, project), start(registry, project)
    with pytest.raises(Conflict) as raised:
        run_compare(one, other)
    assert raised.value.code == "no_common_ancestor"
    assert raised.value.status_code == 409


def test_chunks_are_capped_per_side(registry, project):
    parent = start(registry, project)
    child = fork(registry, parent, 1, "f")
    result = run_compare(parent, child, limit=2)
    assert texts(result.a.chunks) == ["two main", "three main"]
    assert result.a.chunks_more == 1
    assert texts(result.b.chunks) == ["two f", "three f"]
    assert result.b.chunks_more == 1


# --- The API -------------------------------------------------------------------------------------


def url(a: Run, b: Run) -> str:
    return f"/api/v1/runs/{a.id}/compare/{b.id}/"


def test_api_compare(registry, project, make_token, client_for):
    parent = start(registry, project)
    child = fork(registry, parent, 2, "f")
    client = client_for(make_token(["runs:read"]))
    response = client.get(url(parent, child))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["common"] == {
        "run": str(parent.id),
        "checkpoint": 2,
        "session_length": 2,
        "generations": 1,
    }
    assert body["state_diff"][0] == {"op": "replace", "path": "/tag", "old": "main", "new": "f"}
    assert [c["content"]["text"] for c in body["a"]["chunks"]["results"]] == [
        "three main",
        "four main",
    ]
    assert body["b"]["chunks"]["start"] == 2
    assert body["b"]["chunks"]["session"] == str(child.session_id)
    assert [e["request"]["args"][0] for e in body["b"]["effects"]["results"]] == ["four:f"]
    assert body["b"]["effects"]["more"] == 0
    assert body["b"]["branch_checkpoint"] == 2
    assert body["a"]["state"]["tag"] == "main"

    limited = client.get(url(parent, child) + "?limit=1").json()
    assert len(limited["a"]["chunks"]["results"]) == 1
    assert limited["a"]["chunks"]["more"] == 1
    assert client.get(url(parent, child) + "?limit=0").status_code == 400
    assert client.get(url(parent, child) + "?lmit=1").status_code == 400


def test_api_unrelated_is_409(registry, project, make_token, client_for):
    one, other = start(registry, project), start(registry, project)
    response = client_for(make_token(["runs:read"])).get(url(one, other))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "no_common_ancestor"


def test_api_scope(registry, project, other_project, foreign_project, make_token, client_for):
    parent = start(registry, project)
    child = fork(registry, parent, 2, "f")
    foreign = start(registry, foreign_project)
    before = (RunFork.objects.count(), Run.objects.count(), EffectRecord.objects.count())

    allowed = client_for(make_token(["runs:read"]))
    # Another tenant's run on either side: 404, as a missing run.
    for a, b in ((parent, foreign), (foreign, parent)):
        response = allowed.get(url(a, b))
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    # Anonymous, a missing grant, a token of another project.
    assert client_for(None).get(url(parent, child)).status_code == 401
    assert client_for(make_token(["sessions:read"])).get(url(parent, child)).status_code == 403
    elsewhere = client_for(make_token(["runs:read"], projects=[other_project]))
    assert elsewhere.get(url(parent, child)).status_code == 404
    assert (RunFork.objects.count(), Run.objects.count(), EffectRecord.objects.count()) == before
