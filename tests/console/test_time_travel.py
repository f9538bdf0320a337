"""Time travel in the console: "fork from here" on a checkpoint row, the fork's lineage on both
runs' pages, the branch compare page, replay and its report, and an ``effect_in_ancestor``
review with its three outcomes bound to both digests. Django test client, HTML assertions."""

from __future__ import annotations

import html
from typing import Any

import pytest

from effects_app.models import EffectRecord
from openrath_project.tenancy.models import AuditEvent
from runs_app import registration
from runs_app import services as run_services
from runs_app.models import Run, RunFork
from runs_app.registry import WorkflowRegistry
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
    monkeypatch.setitem(compare_flows.THREE, "suffix", "")
    return fresh


@pytest.fixture
def finished(registry, project) -> Run:
    run, _ = run_services.run_create(
        project=project, workflow=registry.get("compare_steps"), state={"tag": "main"}
    )
    run = drive(registry, run.id)
    assert (run.status, run.checkpoint_seq) == ("succeeded", 4)
    return run


def page(client: Any, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, response.content[:500]
    return html.unescape(response.content.decode())


def counts() -> tuple[int, int, int]:
    return (Run.objects.count(), RunFork.objects.count(), EffectRecord.objects.count())


# --- Fork from here ------------------------------------------------------------------------------


def test_checkpoint_rows_offer_fork_from_here(login, finished):
    body = page(login("operator"), f"/console/runs/{finished.id}/")
    # Checkpoints 1..3 have next nodes; 4 ended the run.
    for seq in (1, 2, 3):
        assert f'data-checkpoint="{seq}"' in body
        assert f"Fork a new run from checkpoint {seq}" in body
    assert 'data-checkpoint="4"' not in body
    assert "the run ended here" in body
    assert page(login("viewer"), f"/console/runs/{finished.id}/").count("fork from here") == 0


def test_fork_from_here(login, registry, finished):
    operator = login("operator")
    response = operator.post(
        f"/console/runs/{finished.id}/fork/",
        {"checkpoint": "2", "state_patch": '{"tag": "f"}', "reason": "try another tag"},
    )
    assert response.status_code == 302
    edge = RunFork.objects.get(parent=finished)
    child = edge.child
    assert response["Location"] == f"/console/runs/{child.id}/"
    assert (edge.checkpoint_seq, edge.state_patch, edge.reason, edge.created_by) == (
        2,
        {"tag": "f"},
        "try another tag",
        "user:operator-acme",
    )
    assert child.next_nodes == ["three"]
    assert run_services.run_state_at(child)["tag"] == "f"
    event = AuditEvent.objects.filter(action="run.fork").get()
    assert (event.outcome, event.object_id) == ("success", str(finished.id))
    assert (event.details["fork"], event.details["checkpoint"]) == (str(child.id), 2)

    # The new run's page: where it came from, by whom and why, and the compare link.
    body = page(operator, f"/console/runs/{child.id}/")
    assert "Forked run" in body  # the flash message
    assert f'<a href="/console/runs/{finished.id}/">compare_steps' in body
    assert "at checkpoint 2 by user:operator-acme: try another tag" in body
    assert f'href="/console/runs/{finished.id}/compare/{child.id}/" id="compare-parent"' in body
    assert '"tag": "f"' in body  # the state patch
    # The parent's page lists the fork.
    parent_body = page(operator, f"/console/runs/{finished.id}/")
    assert f'<li data-run="{child.id}">' in parent_body
    assert "at checkpoint 2" in parent_body
    assert f"/console/runs/{finished.id}/compare/{child.id}/" in parent_body


def test_fork_refusals_change_nothing(login, finished, other_tenant, member):
    before = counts()
    url = f"/console/runs/{finished.id}/fork/"
    # A viewer may not fork (403), whatever the form says.
    assert login("viewer").post(url, {"checkpoint": "1"}).status_code == 403
    operator = login("operator")
    bad_patch = operator.post(url, {"checkpoint": "1", "state_patch": "{not json"})
    assert bad_patch.status_code == 400
    assert "state_patch" in html.unescape(bad_patch.content.decode())
    # The refused form keeps what was typed, open on its row.
    assert "{not json" in html.unescape(bad_patch.content.decode())
    ended = operator.post(url, {"checkpoint": "4"})
    assert ended.status_code == 409
    assert "nothing_to_run" in ended.content.decode()
    out_of_range = operator.post(url, {"checkpoint": "9"})
    assert out_of_range.status_code == 400
    # Another tenant's operator: the run does not exist for them.
    stranger = login(user=member("operator", tenant=other_tenant, username="operator-other"))
    assert stranger.post(url, {"checkpoint": "1"}).status_code == 404
    assert counts() == before
    refused = AuditEvent.objects.filter(action="run.fork").exclude(outcome="success")
    assert refused.count() == 5


# --- Branch compare ------------------------------------------------------------------------------


def test_branch_compare_page(login, registry, finished):
    child = drive(
        registry,
        run_fork(run=finished, checkpoint_seq=2, state_patch={"tag": "f"}, registry=registry).id,
    )
    body = page(login("viewer"), f"/console/runs/{finished.id}/compare/{child.id}/")
    assert 'id="compare-common"' in body
    assert f'data-run="{finished.id}" data-checkpoint="2"' in body
    assert 'id="compare-shared">2<' in body
    # The state diff, as rows: path, old, new.
    assert '<tr class="diff-replace" data-path="/tag" data-op="replace">' in body
    assert '<tr class="diff-replace" data-path="/receipts/1" data-op="replace">' in body
    # The chunks after the shared prefix, side by side; the prefix is not repeated.
    side_a, side_b = body.split('data-side="a"')[1].split('data-side="b"')
    assert "three main" in side_a
    assert "four main" in side_a
    assert "one main" not in side_a
    assert "three f" in side_b
    assert "four f" in side_b
    assert "two main" not in side_b
    # Each side's effects after the common checkpoint: its own step-four note.
    assert "<code>note-main</code>" in side_a
    assert "<code>note-f</code>" not in side_a
    assert "<code>note-f</code>" in side_b


def test_branch_compare_refusals(login, registry, finished, project, foreign_project):
    other, _ = run_services.run_create(
        project=project, workflow=registry.get("compare_steps"), state={}
    )
    viewer = login("viewer")
    unrelated = page(viewer, f"/console/runs/{finished.id}/compare/{other.id}/", status=409)
    assert "no_common_ancestor" in unrelated
    foreign, _ = run_services.run_create(
        project=foreign_project, workflow=registry.get("compare_steps"), state={}
    )
    page(viewer, f"/console/runs/{finished.id}/compare/{foreign.id}/", status=404)
    page(viewer, f"/console/runs/{foreign.id}/compare/{finished.id}/", status=404)


# --- Replay --------------------------------------------------------------------------------------


def test_replay_button_and_report(login, registry, finished):
    operator = login("operator")
    assert 'id="replay-form"' in page(operator, f"/console/runs/{finished.id}/")
    assert 'id="replay-form"' not in page(login("viewer"), f"/console/runs/{finished.id}/")
    notes_before = list(compare_flows.NOTES)

    response = operator.post(f"/console/runs/{finished.id}/replay/")
    assert response.status_code == 302
    replay = Run.objects.get(replay_of=finished)
    assert response["Location"] == f"/console/runs/{replay.id}/"
    body = page(operator, f"/console/runs/{replay.id}/")
    assert 'id="replay-report"' in body
    assert 'data-identical="true"' in body
    assert "<strong>Identical</strong>" in body
    assert f'id="replay-of">{finished.id}<' in body
    assert notes_before == compare_flows.NOTES  # the replay performed no effect

    # New code in step three: the report names that step, with its state and chunk diffs.
    compare_flows.THREE["suffix"] = "-v2"
    assert operator.post(f"/console/runs/{finished.id}/replay/").status_code == 302
    changed = Run.objects.filter(replay_of=finished).exclude(id=replay.id).get()
    body = page(operator, f"/console/runs/{changed.id}/")
    assert 'data-identical="false"' in body
    assert 'id="replay-step">three<' in body
    assert '<tr class="diff-replace" data-path="/steps/2" data-op="replace">' in body
    state_table = body.split('id="replay-state-diff"')[1].split("</table>")[0]
    assert '"three"' in state_table
    assert '"three-v2"' in state_table
    chunk_table = body.split('id="replay-chunk-diff"')[1].split("</table>")[0]
    assert '"three main"' in chunk_table
    assert '"three-v2 main"' in chunk_table
    # The original lists its replays: one identical, one that differs.
    listing = page(operator, f"/console/runs/{finished.id}/").split('id="run-replays"')[1]
    listing = listing.split("</ul>")[0]
    assert listing.count("<li") == 2
    assert "identical" in listing
    assert "differs" in listing
    assert AuditEvent.objects.filter(action="run.replay", outcome="success").count() == 2


def test_runs_list_keeps_replays_apart(login, finished):
    operator = login("operator")
    assert operator.post(f"/console/runs/{finished.id}/replay/").status_code == 302
    replay = Run.objects.get(replay_of=finished)
    listed = page(operator, "/console/runs/")
    assert f'data-run="{finished.id}"' in listed
    assert f'data-run="{replay.id}"' not in listed
    replays = page(operator, "/console/runs/?kind=replay")
    assert f'data-run="{replay.id}"' in replays
    assert f'data-run="{finished.id}"' not in replays


def test_replay_refused_for_a_viewer(login, finished):
    before = counts()
    assert login("viewer").post(f"/console/runs/{finished.id}/replay/").status_code == 403
    assert counts() == before


# --- effect_in_ancestor review -------------------------------------------------------------------


@pytest.fixture
def ancestor_review(registry, finished) -> tuple[Run, EffectRecord]:
    """A fork from checkpoint 1 with the parent's tag: its step two reaches the effect
    ``note-main`` its parent committed after checkpoint 1, in another timeline."""
    child = drive(registry, run_fork(run=finished, checkpoint_seq=1, registry=registry).id)
    assert (child.status, child.review_reason != "") == ("needs_review", True)
    effect = EffectRecord.objects.get(run=child, status="needs_review")
    assert effect.ancestor is not None
    assert effect.reason == "effect_in_ancestor"
    return child, effect


def test_ancestor_review_shows_both_requests(login, ancestor_review):
    child, effect = ancestor_review
    body = page(login("operator"), "/console/effects/")
    card = body.split(f'id="effect-{effect.id}"')[1].split("</article>")[0]
    assert "The ancestor's request" in card
    assert "The request now" in card
    assert f'class="ancestor-digest">{effect.ancestor.request_digest}<' in card
    assert f'name="ancestor_digest" value="{effect.ancestor.request_digest}"' in card
    assert f'name="request_digest" value="{effect.request_digest}"' in card
    # The step is the same, the note's argument too: the requests are the same.
    assert "The two requests are the same." in card
    for outcome in ("perform_again", "reuse_ancestor", "cancel_run"):
        assert f'value="{outcome}"' in card
    assert 'value="applied"' not in card
    assert 'value="not_applied"' not in card


@pytest.mark.parametrize(
    ("outcome", "run_status"),
    [("perform_again", "queued"), ("reuse_ancestor", "queued"), ("cancel_run", "cancelled")],
)
def test_ancestor_review_outcomes(login, ancestor_review, outcome, run_status):
    child, effect = ancestor_review
    response = login("operator").post(
        f"/console/effects/{effect.id}/resolve/",
        {
            "outcome": outcome,
            "request_digest": effect.request_digest,
            "ancestor_digest": effect.ancestor.request_digest,
            "reason": "checked the other timeline",
        },
    )
    assert response.status_code == 302
    effect.refresh_from_db()
    assert (effect.status, effect.resolution) == ("resolved", outcome)
    assert Run.objects.get(id=child.id).status == run_status
    event = AuditEvent.objects.filter(action="effect.resolve", outcome="success").get()
    assert event.details["ancestor_digest"] == effect.ancestor.request_digest


def test_ancestor_review_is_bound_to_the_ancestor_digest(login, ancestor_review):
    child, effect = ancestor_review
    operator = login("operator")
    url = f"/console/effects/{effect.id}/resolve/"
    common = {"outcome": "reuse_ancestor", "request_digest": effect.request_digest}
    wrong = operator.post(url, {**common, "ancestor_digest": "0" * 64})
    assert wrong.status_code == 409
    assert "digest_mismatch" in wrong.content.decode()
    missing = operator.post(url, common)
    assert missing.status_code == 409
    takeover_outcome = operator.post(
        url, {**common, "outcome": "applied", "ancestor_digest": effect.ancestor.request_digest}
    )
    assert takeover_outcome.status_code == 400
    effect.refresh_from_db()
    assert (effect.status, effect.resolution) == ("needs_review", "")
    assert Run.objects.get(id=child.id).status == "needs_review"


# --- Lineage graph -------------------------------------------------------------------------------


def test_lineage_graph_knows_run_forks(login, registry, finished):
    child = run_fork(run=finished, checkpoint_seq=2, registry=registry)
    body = page(login("viewer"), f"/console/sessions/{child.session_id}/lineage/")
    # The graph's data: the fork's working session names the run and checkpoint it came from
    # (lineage.js labels it "run fork @2").
    assert f'"forked_from": {{"run": "{finished.id}", "checkpoint": 2}}' in body
    assert "run fork @k" in body
