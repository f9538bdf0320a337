"""Lineage-aware effects (issue 22, item 2): a fork that reaches an effect its ancestor committed.

The worked example of docs/time-travel.md: ``refunds`` issues a refund in step ``refund``, which
starts after checkpoint 3; a fork from checkpoint 2 reaches the refund again.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from effects_app.models import EffectRecord
from effects_app.services import EFFECT_IN_ANCESTOR, effect_call, effect_resolve
from openrath_project.errors import Conflict, ValidationFailed
from openrath_project.tenancy.models import AuditEvent
from runs_app import registration, services
from runs_app.models import Run, RunEvent, RunFork
from runs_app.registry import WorkflowRegistry
from runs_app.services.forks import run_fork
from runs_app.step import StepRef
from tests.runs_app.conftest import drive
from tests.runs_app.workflows import forking
from tests.support import error_of

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = {"order": "A-17", "amount": 30}


@pytest.fixture
def forks(monkeypatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([forking.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    forking.WORLD.clear()
    return fresh


def _parent(forks, project, mode="plain", **state):
    run, _ = services.run_create(
        project=project, workflow=forks.get("refunds"), state={**ORDER, "mode": mode, **state}
    )
    done = drive(forks, run.id)
    assert done.status == "succeeded", done.error
    refund = EffectRecord.objects.get(run=done, key="refund")
    assert (refund.status, refund.checkpoint_seq, refund.step) == ("succeeded", 3, "refund")
    return done


def _calls(name: str) -> int:
    return sum(1 for fn, _ in forking.WORLD if fn == name)


def _in_review(forks, parent, k=2, patch=None):
    child = run_fork(run=parent, checkpoint_seq=k, state_patch=patch)
    parked = drive(forks, child.id)
    assert parked.status == "needs_review"
    assert parked.review_reason == EFFECT_IN_ANCESTOR
    record = EffectRecord.objects.get(run=parked, key="refund")
    assert record.status == "needs_review"
    assert record.reason == EFFECT_IN_ANCESTOR
    return parked, record


def test_the_worked_example_parks_the_fork_with_both_requests(forks, project):
    parent = _parent(forks, project)
    assert _calls("issue_refund") == 1
    child, record = _in_review(forks, parent, patch={"amount": 45})
    ancestor = EffectRecord.objects.get(run=parent, key="refund")
    assert record.ancestor_id == ancestor.id
    assert record.checkpoint_seq == 3
    assert _calls("issue_refund") == 1  # not performed again on its own
    event = RunEvent.objects.filter(run=child, type="run.needs_review").get()
    assert event.data["reason"] == EFFECT_IN_ANCESTOR
    assert event.data["request"]["args"] == ["A-17", 45]
    assert event.data["ancestor"]["request"]["args"] == ["A-17", 30]
    assert event.data["ancestor"]["run"] == str(parent.id)
    assert event.data["ancestor"]["checkpoint"] == 3
    assert event.data["diff"] == [{"op": "replace", "path": "/args/1", "old": 30, "new": 45}]
    # The lookup effect (checkpoint 1) came before the branch point: the fork never reached it.
    assert _calls("lookup_order") == 1
    assert not EffectRecord.objects.filter(run=child, key="lookup").exists()


def test_perform_again(forks, project):
    parent = _parent(forks, project)
    child, record = _in_review(forks, parent)
    ancestor = EffectRecord.objects.get(run=parent, key="refund")
    resolved = effect_resolve(
        effect=record,
        outcome="perform_again",
        request_digest=record.request_digest,
        ancestor_digest=ancestor.request_digest,
        reason="a second refund is right here",
        actor="user:olivia",
    )
    assert (resolved.status, resolved.resolution) == ("resolved", "perform_again")
    done = drive(forks, child.id)
    assert done.status == "succeeded"
    assert _calls("issue_refund") == 2
    record.refresh_from_db()
    assert record.status == "succeeded"
    # Performed with the fork's own idempotency key, not the ancestor's.
    assert done.output["receipt"]["key"] == record.idempotency_key[:8]
    assert record.idempotency_key != ancestor.idempotency_key


def test_reuse_the_ancestors_result(forks, project):
    parent = _parent(forks, project)
    child, record = _in_review(forks, parent)
    ancestor = EffectRecord.objects.get(run=parent, key="refund")
    effect_resolve(
        effect=record,
        outcome="reuse_ancestor",
        request_digest=record.request_digest,
        ancestor_digest=ancestor.request_digest,
        actor="user:olivia",
    )
    done = drive(forks, child.id)
    assert done.status == "succeeded"
    assert _calls("issue_refund") == 1
    assert done.output["receipt"] == parent.output["receipt"] == ancestor.result
    record.refresh_from_db()
    assert (record.status, record.resolution, record.resolution_result) == (
        "resolved",
        "reuse_ancestor",
        ancestor.result,
    )


def test_cancel_the_run(forks, project):
    parent = _parent(forks, project)
    child, record = _in_review(forks, parent)
    ancestor = EffectRecord.objects.get(run=parent, key="refund")
    effect_resolve(
        effect=record,
        outcome="cancel_run",
        request_digest=record.request_digest,
        ancestor_digest=ancestor.request_digest,
        reason="not in this timeline",
        actor="user:olivia",
    )
    assert Run.objects.get(id=child.id).status == "cancelled"
    assert _calls("issue_refund") == 1
    assert Run.objects.get(id=parent.id).status == "succeeded"


def test_the_answer_is_bound_to_both_digests(forks, project):
    parent = _parent(forks, project)
    child, record = _in_review(forks, parent)
    ancestor = EffectRecord.objects.get(run=parent, key="refund")
    snapshot = EffectRecord.objects.filter(id=record.id).values().get()
    with pytest.raises(Conflict) as wrong_ancestor:
        effect_resolve(
            effect=record,
            outcome="reuse_ancestor",
            request_digest=record.request_digest,
            ancestor_digest="0" * 64,
        )
    assert wrong_ancestor.value.code == "digest_mismatch"
    assert wrong_ancestor.value.details == {"ancestor_digest": ancestor.request_digest}
    with pytest.raises(Conflict) as missing:
        effect_resolve(effect=record, outcome="perform_again", request_digest=record.request_digest)
    assert missing.value.code == "digest_mismatch"
    with pytest.raises(Conflict) as wrong_request:
        effect_resolve(
            effect=record,
            outcome="perform_again",
            request_digest=ancestor.request_digest[::-1],
            ancestor_digest=ancestor.request_digest,
        )
    assert wrong_request.value.code == "digest_mismatch"
    with pytest.raises(ValidationFailed):  # a takeover's answer does not answer this review
        effect_resolve(
            effect=record,
            outcome="applied",
            request_digest=record.request_digest,
            ancestor_digest=ancestor.request_digest,
        )
    assert EffectRecord.objects.filter(id=record.id).values().get() == snapshot
    assert Run.objects.get(id=child.id).status == "needs_review"


def test_idempotent_without_opt_in_is_reviewed(forks, project):
    parent = _parent(forks, project, mode="idempotent")
    _child, record = _in_review(forks, parent)
    assert record.effect_class == "idempotent"
    assert _calls("issue_refund") == 1


def test_idempotent_opted_in_with_the_same_request_reuses(forks, project):
    parent = _parent(forks, project, mode="reusable")
    assert _calls("refund_reusable") == 1
    child = drive(forks, run_fork(run=parent, checkpoint_seq=2).id)
    assert child.status == "succeeded"
    assert _calls("refund_reusable") == 1
    ancestor = EffectRecord.objects.get(run=parent, key="refund")
    record = EffectRecord.objects.get(run=child, key="refund")
    assert (record.status, record.ancestor_id, record.result) == (
        "succeeded",
        ancestor.id,
        ancestor.result,
    )
    assert child.output["receipt"] == parent.output["receipt"]


def test_idempotent_opted_in_with_another_request_is_reviewed(forks, project):
    parent = _parent(forks, project, mode="reusable")
    _child, record = _in_review(forks, parent, patch={"amount": 31})
    assert _calls("refund_reusable") == 1
    assert record.request["args"] == ["A-17", 31]


def test_an_effect_before_the_branch_point_is_never_rerun(forks, project):
    run, _ = services.run_create(
        project=project, workflow=forks.get("looping"), state={"who": "ada"}
    )
    parent = drive(forks, run.id)
    assert parent.status == "succeeded"
    assert _calls("notify") == 1
    assert EffectRecord.objects.get(run=parent, key="notify").checkpoint_seq == 0
    # Checkpoint 2: the router sent the run back to ``ask``, whose effect was committed at 0.
    child = drive(forks, run_fork(run=parent, checkpoint_seq=2).id)
    assert child.status == "succeeded"
    assert _calls("notify") == 1
    record = EffectRecord.objects.get(run=child, key="notify")
    assert record.status == "succeeded"
    assert record.result == {"notified": "ada"}
    assert "before the branch point" in record.reason
    # A fork from the start reaches it after its branch point (0): a review.
    again = drive(forks, run_fork(run=parent, checkpoint_seq=0).id)
    assert again.review_reason == EFFECT_IN_ANCESTOR


def test_three_generations_find_the_nearest_ancestor(forks, project):
    root = _parent(forks, project)
    root_refund = EffectRecord.objects.get(run=root, key="refund")
    # The child forks after the refund (checkpoint 4): it never reaches it.
    child = drive(forks, run_fork(run=root, checkpoint_seq=4).id)
    assert child.status == "succeeded"
    assert not EffectRecord.objects.filter(run=child, key="refund").exists()
    # The grandchild forks the child at 2 (the root's history): two hops up, branch point 2.
    grandchild, record = _in_review(forks, child, k=2)
    assert record.ancestor_id == root_refund.id
    effect_resolve(
        effect=record,
        outcome="perform_again",
        request_digest=record.request_digest,
        ancestor_digest=root_refund.request_digest,
    )
    grandchild = drive(forks, grandchild.id)
    assert grandchild.status == "succeeded"
    assert _calls("issue_refund") == 2
    # A great-grandchild from the grandchild at 2: the nearest committed record is the
    # grandchild's (performed again there), not the root's.
    _great, nearest = _in_review(forks, grandchild, k=2)
    assert nearest.ancestor_id == EffectRecord.objects.get(run=grandchild, key="refund").id
    assert RunFork.objects.count() == 3


def _held(forks, run):
    claim = services.lease_claim(worker="probe", run_id=run.id, workflows=tuple(forks.names()))
    assert claim is not None
    return StepRef(
        run_id=run.id,
        step="probe",
        checkpoint_seq=run.checkpoint_seq,
        fencing_token=claim.token,
        tenant_id=run.tenant_id,
        project_id=run.project_id,
        session_id=run.session_id,
    )


def _queries(ref, key):
    with CaptureQueriesContext(connection) as captured:
        assert effect_call(ref, key=key, fn=forking.notify, args=("x",)) == {"notified": "x"}
    return [q["sql"] for q in captured.captured_queries]


def test_unforked_runs_pay_no_extra_query_forks_one(forks, project):
    fork_table = RunFork._meta.db_table
    plain, _ = services.run_create(project=project, workflow=forks.get("looping"), state={})
    plain_ref = _held(forks, plain)
    plain_first = _queries(plain_ref, "k")
    # The record and whether the run is a fork: one statement, the first.
    assert fork_table in plain_first[0]
    assert sum(fork_table in sql for sql in plain_first) == 1
    assert len(_queries(plain_ref, "k")) == 1  # recorded: one statement, as before

    parent = _parent(forks, project)
    child = run_fork(run=parent, checkpoint_seq=2)
    fork_ref = _held(forks, child)
    fork_first = _queries(fork_ref, "k")
    assert len(fork_first) == len(plain_first) + 1  # the ancestors' ledgers: one statement
    assert sum(fork_table in sql for sql in fork_first) == 2
    assert len(_queries(fork_ref, "k")) == 1


def test_api_shows_the_ancestor_and_resolves_with_both_digests(
    forks, project, make_token, client_for
):
    parent = _parent(forks, project)
    child, record = _in_review(forks, parent, patch={"amount": 45})
    ancestor = EffectRecord.objects.get(run=parent, key="refund")
    api = client_for(make_token(["effects:read", "effects:resolve"]))
    body = api.get(f"/api/v1/effects/{record.id}/").json()
    assert body["checkpoint"] == 3
    assert body["ancestor"]["effect"] == str(ancestor.id)
    assert body["ancestor"]["run"] == str(parent.id)
    assert body["ancestor"]["request_digest"] == ancestor.request_digest
    assert body["ancestor"]["request"]["args"] == ["A-17", 30]
    assert body["request"]["args"] == ["A-17", 45]
    assert body["ancestor"]["diff"] == [{"op": "replace", "path": "/args/1", "old": 30, "new": 45}]
    url = f"/api/v1/effects/{record.id}/resolve/"
    wrong = api.post(
        url,
        {
            "outcome": "reuse_ancestor",
            "request_digest": record.request_digest,
            "ancestor_digest": "f" * 64,
        },
        format="json",
    )
    assert wrong.status_code == 409
    assert error_of(wrong)["code"] == "digest_mismatch"
    assert EffectRecord.objects.get(id=record.id).status == "needs_review"
    ok = api.post(
        url,
        {
            "outcome": "reuse_ancestor",
            "request_digest": record.request_digest,
            "ancestor_digest": ancestor.request_digest,
            "reason": "the refund stands",
        },
        format="json",
    )
    assert ok.status_code == 200, ok.content
    assert ok.json()["resolution"] == "reuse_ancestor"
    audits = list(
        AuditEvent.objects.filter(action="effect.resolve")
        .order_by("id")
        .values_list("outcome", "status_code", "object_id")
    )
    assert audits == [("failure", 409, str(record.id)), ("success", 200, str(record.id))]
    done = drive(forks, child.id)
    assert done.output["receipt"] == ancestor.result
