"""Forking a run from a checkpoint (issue 22, item 1): the service, the API and the rows written."""

from __future__ import annotations

import pytest

from openrath_project.errors import Conflict, ValidationFailed
from openrath_project.tenancy.models import AuditEvent
from runs_app import registration, services
from runs_app.models import Checkpoint, Run, RunEvent, RunFork, WorkflowPlan
from runs_app.registry import WorkflowRegistry
from runs_app.services.forks import merge_patch, run_fork
from sessions_app.models import Chunk, LineageEdge, Session
from sessions_app.selectors import chunk_all
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import forking
from tests.support import error_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def forks(monkeypatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([forking.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    forking.WORLD.clear()
    return fresh


def _finished(registry, project, name, state):
    run, _ = services.run_create(project=project, workflow=registry.get(name), state=state)
    done = drive(registry, run.id)
    assert done.status == "succeeded", done.error
    return done


def _texts(run: Run) -> list[str]:
    """The run's view of its working session (its first ``session_len`` chunks)."""
    chunks = chunk_all(run.session_id, upto=run.session_len)
    return [c.content.get("text", "") for c in chunks]


def _counts() -> dict[str, int]:
    return {
        "runs": Run.objects.count(),
        "checkpoints": Checkpoint.objects.count(),
        "sessions": Session.objects.count(),
        "edges": LineageEdge.objects.count(),
        "chunks": Chunk.objects.count(),
        "forks": RunFork.objects.count(),
        "events": RunEvent.objects.count(),
    }


ROWS_OF_A_FORK = {
    "runs": 1,
    "checkpoints": 1,
    "sessions": 1,
    "edges": 1,
    "chunks": 0,
    "forks": 1,
    "events": 2,
}


def _fork_and_check_rows(**kwargs) -> Run:
    before = _counts()
    child = run_fork(**kwargs)
    after = _counts()
    assert {k: after[k] - before[k] for k in after} == ROWS_OF_A_FORK
    return child


def test_merge_patch_is_rfc_7386():
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": "b", "b": "c"}, {"a": None}) == {"b": "c"}
    assert merge_patch({"a": ["b"]}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    assert merge_patch({}, {"a": {"bb": {"ccc": None}}}) == {"a": {"bb": {}}}


def test_fork_at_each_checkpoint_of_a_linear_run(forks, project):
    parent = _finished(forks, project, "fork_linear", {"who": "ada"})
    assert parent.checkpoint_seq == 4
    final_texts = _texts(parent)
    assert len(final_texts) == 4
    for k in range(4):
        child = _fork_and_check_rows(run=parent, checkpoint_seq=k, actor="user:olivia")
        assert (child.status, child.checkpoint_seq, child.state_seq) == ("queued", k, k)
        assert child.next_nodes == [["a", "b", "c", "d"][k]]
        assert child.plan_id == parent.plan_id
        assert child.session_len == k  # one chunk a step: the checkpoint's length
        # The forked session shares the prefix: no chunk of its own yet, its base holds it.
        working = Session.objects.get(id=child.session_id)
        assert (working.own_len, working.length) == (0, k)
        edge = LineageEdge.objects.get(child=working)
        assert (edge.op, edge.parent_len) == ("fork", k)
        assert _texts(child) == final_texts[:k]
        done = drive(forks, child.id)
        assert done.status == "succeeded", done.error
        assert done.output == parent.output
        assert done.checkpoint_seq == 4  # numbering continued from k
        assert list(
            Checkpoint.objects.filter(run=done).order_by("seq").values_list("seq", flat=True)
        ) == list(range(k, 5))
        assert _texts(done) == final_texts
        fork_edge = RunFork.objects.get(child=done)
        assert (fork_edge.parent_id, fork_edge.checkpoint_seq, fork_edge.created_by) == (
            parent.id,
            k,
            "user:olivia",
        )
        types = list(RunEvent.objects.filter(run=done).order_by("seq").values_list("type"))
        assert types[:2] == [("run.created",), ("run.forked",)]
    # The last checkpoint ended the run: nothing to run from there.
    with pytest.raises(Conflict) as ended:
        run_fork(run=parent, checkpoint_seq=4)
    assert ended.value.code == "nothing_to_run"


def test_fork_at_each_checkpoint_of_a_router_run_with_a_patch(forks, project):
    parent = _finished(forks, project, "fork_routed", {"amount": 50})
    assert parent.output["steps"] == ["start", "small", "finish"]
    assert parent.checkpoint_seq == 4  # start, decide, small, finish
    outcomes = {}
    for k in range(4):
        child = run_fork(run=parent, checkpoint_seq=k, state_patch={"amount": 500})
        outcomes[k] = drive(forks, child.id).output["steps"]
    # Before the router decided (0, 1), the patch changes the route; after (2, 3), it is taken.
    assert outcomes == {
        0: ["start", "large", "finish"],
        1: ["start", "large", "finish"],
        2: ["start", "small", "finish"],
        3: ["start", "small", "finish"],
    }


def test_fork_at_each_checkpoint_of_a_fanout_run(forks, project):
    parent = _finished(forks, project, "fork_fanout", {})
    assert parent.output["found"] == ["L", "R"]
    seqs = list(Checkpoint.objects.filter(run=parent).order_by("seq").values_list("seq", "step"))
    assert seqs == [(1, "plan"), (2, "split"), (3, "merge"), (4, "after")]
    for k in (0, 1):  # before the router: the fork runs the fan-out again
        child = run_fork(run=parent, checkpoint_seq=k)
        done = drive(forks, child.id)
        assert done.status == "succeeded"
        assert done.output == parent.output
        assert Run.objects.filter(parent=done).count() == 2  # its own branches
    with pytest.raises(Conflict) as inside:
        run_fork(run=parent, checkpoint_seq=2)
    assert inside.value.code == "fork_inside_fanout"
    child = run_fork(run=parent, checkpoint_seq=3)  # after the join
    done = drive(forks, child.id)
    assert done.output == parent.output
    assert Run.objects.filter(parent=done).count() == 0
    # A branch of the fan-out can be forked too: it ends at the join, as the branch did.
    branch = Run.objects.get(parent=parent, branch="left")
    again = run_fork(run=branch, checkpoint_seq=0)
    assert again.next_nodes == ["left"]
    finished = drive(forks, again.id)
    assert finished.status == "succeeded"
    assert finished.output == branch.output


def test_three_generations(forks, project):
    root = _finished(forks, project, "fork_linear", {"who": "ada"})
    child = drive(forks, run_fork(run=root, checkpoint_seq=1, state_patch={"who": "bob"}).id)
    assert child.output["steps"] == ["a", "b", "c", "d"]
    assert child.output["who"] == "bob"
    # At a checkpoint the child made itself, and before its own branch point (the root's).
    grandchild = drive(forks, run_fork(run=child, checkpoint_seq=3).id)
    assert grandchild.output == child.output
    early = run_fork(run=child, checkpoint_seq=0)
    assert early.state == {"who": "ada"}  # the child's history before 1 is the root's
    assert drive(forks, early.id).output["who"] == "ada"
    assert _texts(grandchild)[:1] == _texts(root)[:1]
    lineage = list(
        RunFork.objects.filter(child__in=[child, grandchild, early])
        .order_by("id")
        .values_list("parent_id", "child_id", "checkpoint_seq")
    )
    assert lineage == [
        (root.id, child.id, 1),
        (child.id, grandchild.id, 3),
        (child.id, early.id, 0),
    ]


def test_forking_an_active_run_changes_nothing_in_it(forks, project):
    run, _ = services.run_create(
        project=project, workflow=forks.get("fork_linear"), state={"who": "ada"}
    )
    from runs_app.executor import run_one

    # One step, then the run stays running under its lease (a worker mid-way).
    claim = services.lease_claim(worker="w1", workflows=("fork_linear",))
    assert claim is not None
    from runs_app.executor import execute_claim

    execute_claim(claim, registry=forks, max_steps=1)
    active = Run.objects.get(id=run.id)
    assert (active.status, active.checkpoint_seq) == ("running", 1)
    snapshot = Run.objects.filter(id=run.id).values().get()
    events = list(RunEvent.objects.filter(run=run).values_list("seq", "type"))
    child = run_fork(run=active, checkpoint_seq=1)
    assert Run.objects.filter(id=run.id).values().get() == snapshot
    assert list(RunEvent.objects.filter(run=run).values_list("seq", "type")) == events
    assert run_one("w2", registry=forks) is not None  # claims the fork (the parent is held)
    assert Run.objects.get(id=child.id).status == "succeeded"
    assert Run.objects.filter(id=run.id).values().get() == snapshot


def test_bad_checkpoint_and_patch(forks, project):
    parent = _finished(forks, project, "fork_linear", {})
    before = _counts()
    for bad in (-1, 5, 99):
        with pytest.raises(ValidationFailed) as out_of_range:
            run_fork(run=parent, checkpoint_seq=bad)
        assert out_of_range.value.details == {"checkpoint": ["out of range 0..4"]}
    with pytest.raises(ValidationFailed):
        run_fork(run=parent, checkpoint_seq=1, state_patch={"$artifact": {"digest": "x"}})
    with pytest.raises(ValidationFailed):
        run_fork(run=parent, checkpoint_seq=1, plan="newest")
    assert _counts() == before


def test_plan_current_applies_the_drift_rule(forks, project, monkeypatch):
    parent = _finished(forks, project, "fork_linear", {})

    # Compile a changed plan: b -> see -> d (c is gone).
    from openrath_project import flow

    class ForkLinearV2(flow.Workflow):
        name = "fork_linear"

        @flow.step(entry=True, successors=("b",), effects="none")
        def a(self, state, ctx):
            return {**state, "v": 2}

        @flow.step(successors=("see",), effects="none")
        def b(self, state, ctx):
            return {**state, "v": 2}

        @flow.step(successors=("d",), effects="none")
        def see(self, state, ctx):
            return {**state, "saw": True}

        @flow.step(effects="none")
        def d(self, state, ctx):
            return {**state, "d": 2}

    current = WorkflowRegistry()
    current.register(ForkLinearV2)
    before = _counts()
    with pytest.raises(Conflict) as mismatch:
        run_fork(run=parent, checkpoint_seq=2, plan="current", registry=current)
    assert mismatch.value.code == "plan_mismatch"
    assert mismatch.value.details["missing"] == ["c"]
    assert _counts() == before
    child = run_fork(run=parent, checkpoint_seq=1, plan="current", registry=current)
    assert child.plan_id == current.get("fork_linear").plan.hash != parent.plan_id
    assert WorkflowPlan.objects.filter(hash=child.plan_id).exists()
    assert RunFork.objects.get(child=child).plan_mode == "current"
    done = drive(current, child.id)
    assert done.output["saw"] is True
    # Pinned under changed code: the fork stops at its first claim (plan drift), as any run.
    pinned = run_fork(run=parent, checkpoint_seq=1)
    assert drive(current, pinned.id).review_reason == "plan drift"


# --- The API ---------------------------------------------------------------------------------


def test_api_fork_and_lineage(forks, project, make_token, client_for):
    parent = _finished(forks, project, "fork_linear", {"who": "ada"})
    api = client_for(make_token(["runs:write", "runs:read"]))
    response = api.post(
        f"/api/v1/runs/{parent.id}/fork/",
        {"checkpoint": 2, "state_patch": {"who": "bob"}, "reason": "try bob"},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "queued"
    assert body["state"] == {"who": "bob", "steps": ["a", "b"]}
    assert body["next_nodes"] == ["c"]
    assert body["checkpoints"] == 2
    forked_from = body["forked_from"]
    assert forked_from["run"] == str(parent.id)
    assert (forked_from["checkpoint"], forked_from["reason"]) == (2, "try bob")
    assert forked_from["by"].startswith("token:")
    assert api.get(f"/api/v1/runs/{parent.id}/").json()["forked_from"] is None
    assert api.get(f"/api/v1/runs/{body['id']}/").json()["forked_from"] == forked_from
    listed = api.get(f"/api/v1/runs/{parent.id}/forks/").json()
    assert [(f["child"], f["checkpoint"]) for f in listed["results"]] == [(body["id"], 2)]
    assert listed["next"] is None
    audit = AuditEvent.objects.filter(action="run.fork").get()
    assert (audit.outcome, audit.object_id) == ("success", body["id"])
    assert audit.details["parent"] == str(parent.id)


def test_api_fork_errors_and_permissions(
    forks, project, other_project, make_token, client_for, other_tenant
):
    parent = _finished(forks, project, "fork_linear", {})
    url = f"/api/v1/runs/{parent.id}/fork/"
    before = _counts()
    writer = client_for(make_token(["runs:write", "runs:read"]))
    out_of_range = writer.post(url, {"checkpoint": 7}, format="json")
    assert out_of_range.status_code == 400
    assert error_of(out_of_range)["details"] == {"checkpoint": ["out of range 0..4"]}
    ended = writer.post(url, {"checkpoint": 4}, format="json")
    assert ended.status_code == 409
    assert error_of(ended)["code"] == "nothing_to_run"
    not_object = writer.post(url, {"checkpoint": 1, "state_patch": [1]}, format="json")
    assert not_object.status_code == 400
    assert "state_patch" in error_of(not_object)["details"]
    bad_state = writer.post(
        url, {"checkpoint": 1, "state_patch": {"x": {"$artifact": 1}}}, format="json"
    )
    assert bad_state.status_code == 400
    error_of(bad_state)
    assert client_for(None).post(url, {"checkpoint": 1}, format="json").status_code == 401
    reader = client_for(make_token(["runs:read"]))
    assert reader.post(url, {"checkpoint": 1}, format="json").status_code == 403
    foreign = client_for(make_token(["*"], tenant=other_tenant))
    hidden = foreign.post(url, {"checkpoint": 1}, format="json")
    assert hidden.status_code == 404
    assert error_of(hidden)["code"] == "not_found"
    assert foreign.get(f"/api/v1/runs/{parent.id}/forks/").status_code == 404
    other_project_only = client_for(make_token(["*"], projects=[other_project]))
    assert other_project_only.post(url, {"checkpoint": 1}, format="json").status_code == 404
    assert _counts() == before
