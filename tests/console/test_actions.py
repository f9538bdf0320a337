"""Console actions: the same services as the API, audited; refusals change nothing."""

from __future__ import annotations

import pytest
from django.test import Client

from effects_app.models import EffectRecord
from openrath_project.tenancy.models import AuditEvent
from runs_app.models import Interrupt, Run, RunEvent
from tests.console import workflows
from tests.runs_app.conftest import drive

pytestmark = pytest.mark.django_db


def _resolve_url(interrupt: Interrupt) -> str:
    return f"/console/approvals/{interrupt.id}/resolve/"


def _effect_url(effect: EffectRecord) -> str:
    return f"/console/effects/{effect.id}/resolve/"


def _snapshot(interrupt: Interrupt) -> tuple:
    fresh = Interrupt.objects.get(id=interrupt.id)
    run = Run.objects.get(id=interrupt.run_id)
    return (fresh.status, fresh.decision, fresh.response, run.status, run.event_seq)


def _only_audit(action: str) -> AuditEvent:
    return AuditEvent.objects.filter(action=action).get()


# --- Approvals -----------------------------------------------------------------------------------


def test_an_operator_approves_with_a_typed_response(login, waiting, registry):
    run, interrupt = waiting()
    client = login("operator", user=None)
    response = client.post(
        _resolve_url(interrupt),
        {
            "decision": "approve",
            "request_digest": interrupt.request_digest,
            "response.note": "ship it",
            "response.priority": "2",
            "response.channel": '"chat"',
            "reason": "numbers checked",
        },
    )
    assert (response.status_code, response["Location"]) == (302, "/console/approvals/")
    interrupt.refresh_from_db()
    assert (interrupt.status, interrupt.decision, interrupt.response, interrupt.reason) == (
        "resolved",
        "approve",
        {"note": "ship it", "priority": 2, "channel": "chat"},
        "numbers checked",
    )
    assert interrupt.resolved_by == "user:operator-acme"
    assert Run.objects.get(id=run.id).status == "queued"
    event = _only_audit("interrupt.resolve")
    assert (
        event.outcome,
        event.actor,
        event.tenant.slug,
        event.project_id,
        event.object_type,
        event.object_id,
        event.status_code,
    ) == (
        "success",
        "user:operator-acme",
        "acme",
        interrupt.project_id,
        "interrupt",
        str(interrupt.id),
        302,
    )
    assert event.details == {
        "decision": "approve",
        "request_digest": interrupt.request_digest,
        "run": str(run.id),
        "via": "console",
        "method": "POST",
        "path": _resolve_url(interrupt),
    }
    done = drive(registry, run.id)
    assert done.status == "succeeded"
    assert done.output["response"] == {"note": "ship it", "priority": 2, "channel": "chat"}
    # The success message is on the next page.
    assert "Approve: “Ship release 1.2?”" in client.get("/console/approvals/").content.decode()


def test_reject_with_a_reason_from_the_run_page(login, waiting, registry):
    run, interrupt = waiting()
    response = login("operator").post(
        _resolve_url(interrupt),
        {
            "decision": "reject",
            "request_digest": interrupt.request_digest,
            "reason": "not this week",
            "origin": "run",
            "next": f"/console/runs/{run.id}/",
        },
    )
    assert (response.status_code, response["Location"]) == (302, f"/console/runs/{run.id}/")
    done = drive(registry, run.id)
    assert done.output["approved"] is False
    assert done.output["reason"] == "not this week"


def test_a_digest_mismatch_is_a_409_and_changes_nothing(login, waiting):
    run, interrupt = waiting()
    before = _snapshot(interrupt)
    response = login("operator").post(
        _resolve_url(interrupt),
        {"decision": "approve", "request_digest": "0" * 64, "response.note": "ok"},
    )
    assert response.status_code == 409
    body = response.content.decode()
    assert "request_digest does not match the interrupt&#x27;s request: reload and review" in body
    assert 'data-code="digest_mismatch" data-status="409"' in body
    assert "The request shown now is the current one" in body
    # The form on the page now carries the current digest, and keeps what was typed.
    assert f'name="request_digest" value="{interrupt.request_digest}"' in body
    assert '<input type="text" name="response.note" value="ok" required>' in body
    assert _snapshot(interrupt) == before
    event = _only_audit("interrupt.resolve")
    assert (event.outcome, event.status_code, event.details["error_code"]) == (
        "failure",
        409,
        "digest_mismatch",
    )


def test_a_response_that_breaks_the_schema_is_a_400_with_the_api_message(login, waiting):
    run, interrupt = waiting()
    before = _snapshot(interrupt)
    client = login("operator")
    response = client.post(
        _resolve_url(interrupt),
        {"decision": "approve", "request_digest": interrupt.request_digest},
    )
    assert response.status_code == 400
    assert (
        "response does not match the schema: response: &#x27;note&#x27; is a required property"
        in response.content.decode()
    )
    response = client.post(
        _resolve_url(interrupt),
        {
            "decision": "approve",
            "request_digest": interrupt.request_digest,
            "response.note": "x",
            "response.priority": "soon",
        },
    )
    assert response.status_code == 400
    assert "response.priority: must be an integer" in response.content.decode()
    assert _snapshot(interrupt) == before


def test_a_json_response_is_parsed_and_checked(login, waiting, registry):
    run, interrupt = waiting(
        schema={
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"type": "string"}}},
            "required": ["items"],
        }
    )
    client = login("operator")
    bad = client.post(
        _resolve_url(interrupt),
        {
            "decision": "respond",
            "request_digest": interrupt.request_digest,
            "response_json": "{items: [",
        },
    )
    assert bad.status_code == 400
    assert "response must be JSON" in bad.content.decode()
    assert Interrupt.objects.get(id=interrupt.id).status == "pending"
    good = client.post(
        _resolve_url(interrupt),
        {
            "decision": "respond",
            "request_digest": interrupt.request_digest,
            "response_json": '{"items": ["a", "b"]}',
        },
    )
    assert good.status_code == 302
    interrupt.refresh_from_db()
    assert (interrupt.decision, interrupt.response) == ("respond", {"items": ["a", "b"]})


def test_a_second_resolution_is_a_409(login, waiting):
    run, interrupt = waiting()
    client = login("operator")
    data = {
        "decision": "approve",
        "request_digest": interrupt.request_digest,
        "response.note": "first",
    }
    assert client.post(_resolve_url(interrupt), data).status_code == 302
    response = client.post(_resolve_url(interrupt), {**data, "response.note": "second"})
    assert response.status_code == 409
    assert "the interrupt is already resolved" in response.content.decode()
    assert Interrupt.objects.get(id=interrupt.id).response == {"note": "first"}


def test_the_digest_is_required(login, waiting):
    run, interrupt = waiting()
    before = _snapshot(interrupt)
    response = login("operator").post(
        _resolve_url(interrupt), {"decision": "approve", "response.note": "ok"}
    )
    assert response.status_code == 400
    assert "request_digest is required" in response.content.decode()
    assert _snapshot(interrupt) == before


def test_a_viewer_cannot_resolve_403_and_nothing_changes(login, waiting):
    run, interrupt = waiting()
    before = _snapshot(interrupt)
    response = login("viewer").post(
        _resolve_url(interrupt),
        {
            "decision": "approve",
            "request_digest": interrupt.request_digest,
            "response.note": "sneaky",
        },
    )
    assert response.status_code == 403
    assert "this action needs the grant &#x27;interrupts:resolve&#x27;" in response.content.decode()
    assert _snapshot(interrupt) == before
    event = _only_audit("interrupt.resolve")
    assert (event.outcome, event.actor, event.tenant.slug, event.status_code) == (
        "denied",
        "user:viewer-acme",
        "acme",
        403,
    )


def test_csrf_is_enforced(login, waiting):
    run, interrupt = waiting()
    before = _snapshot(interrupt)
    client = login("operator", enforce_csrf_checks=True)
    response = client.post(
        _resolve_url(interrupt),
        {
            "decision": "approve",
            "request_digest": interrupt.request_digest,
            "response.note": "no token",
        },
    )
    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert _snapshot(interrupt) == before
    event = AuditEvent.objects.get()
    assert (event.outcome, event.status_code) == ("denied", 403)
    # With the token the page gave, the same client succeeds.
    page = client.get("/console/approvals/")
    token = page.context["csrf_token"]
    response = client.post(
        _resolve_url(interrupt),
        {
            "csrfmiddlewaretoken": str(token),
            "decision": "approve",
            "request_digest": interrupt.request_digest,
            "response.note": "with token",
        },
    )
    assert response.status_code == 302
    assert Interrupt.objects.get(id=interrupt.id).response == {"note": "with token"}


def test_get_is_not_an_action(login, waiting):
    run, interrupt = waiting()
    assert login("operator").get(_resolve_url(interrupt)).status_code == 405
    assert Interrupt.objects.get(id=interrupt.id).status == "pending"


# --- Effects -------------------------------------------------------------------------------------


def test_an_operator_marks_an_effect_not_applied(login, needs_review, registry):
    run, effect = needs_review()
    response = login("operator").post(
        _effect_url(effect),
        {
            "outcome": "not_applied",
            "request_digest": effect.request_digest,
            "reason": "no mail in the outbox",
        },
    )
    assert (response.status_code, response["Location"]) == (302, "/console/effects/")
    effect.refresh_from_db()
    assert (effect.status, effect.resolution, effect.resolved_by, effect.reason) == (
        "resolved",
        "not_applied",
        "user:operator-acme",
        "no mail in the outbox",
    )
    assert Run.objects.get(id=run.id).status == "queued"
    event = _only_audit("effect.resolve")
    assert (event.outcome, event.object_type, event.object_id, event.project_id) == (
        "success",
        "effect",
        str(effect.id),
        effect.project_id,
    )
    assert event.details["outcome"] == "not_applied"
    assert event.details["request_digest"] == effect.request_digest
    assert event.details["via"] == "console"
    done = drive(registry, run.id)
    assert done.status == "succeeded"
    assert workflows.SENT == ["ops@example.com", "ops@example.com"]


def test_applied_with_a_result(login, needs_review, registry):
    run, effect = needs_review()
    client = login("operator")
    bad = client.post(
        _effect_url(effect),
        {"outcome": "applied", "request_digest": effect.request_digest, "result": "{nope"},
    )
    assert bad.status_code == 400
    assert "result must be JSON" in bad.content.decode()
    assert EffectRecord.objects.get(id=effect.id).status == "needs_review"
    ok = client.post(
        _effect_url(effect),
        {
            "outcome": "applied",
            "request_digest": effect.request_digest,
            "result": '{"sent": "by hand"}',
        },
    )
    assert ok.status_code == 302
    done = drive(registry, run.id)
    assert done.output["receipt"] == {"sent": "by hand"}
    assert workflows.SENT == ["ops@example.com"]


def test_cancel_the_run_of_an_effect(login, needs_review):
    run, effect = needs_review()
    response = login("operator").post(
        _effect_url(effect),
        {"outcome": "cancel_run", "request_digest": effect.request_digest, "reason": "unsure"},
    )
    assert response.status_code == 302
    assert Run.objects.get(id=run.id).status == "cancelled"


def test_effect_refusals_change_nothing(login, needs_review):
    run, effect = needs_review()
    operator = login("operator")
    mismatch = operator.post(
        _effect_url(effect), {"outcome": "not_applied", "request_digest": "f" * 64}
    )
    assert mismatch.status_code == 409
    assert "request_digest does not match the effect&#x27;s request" in mismatch.content.decode()
    unknown = operator.post(
        _effect_url(effect), {"outcome": "maybe", "request_digest": effect.request_digest}
    )
    assert unknown.status_code == 400
    assert "outcome must be one of applied, not_applied, cancel_run" in unknown.content.decode()
    viewer = login("viewer").post(
        _effect_url(effect), {"outcome": "not_applied", "request_digest": effect.request_digest}
    )
    assert viewer.status_code == 403
    effect.refresh_from_db()
    assert (effect.status, effect.resolution) == ("needs_review", "")
    assert Run.objects.get(id=run.id).status == "needs_review"
    outcomes = list(
        AuditEvent.objects.filter(action="effect.resolve")
        .order_by("id")
        .values_list("outcome", "status_code")
    )
    assert outcomes == [("failure", 409), ("failure", 400), ("denied", 403)]


# --- Runs ----------------------------------------------------------------------------------------


def test_cancel_a_run(login, waiting):
    run, interrupt = waiting()
    response = login("operator").post(f"/console/runs/{run.id}/cancel/", {"reason": "wrong data"})
    assert (response.status_code, response["Location"]) == (302, f"/console/runs/{run.id}/")
    assert Run.objects.get(id=run.id).status == "cancelled"
    last = RunEvent.objects.filter(run=run).order_by("-seq").first()
    assert (last.type, last.data) == (
        "run.cancelled",
        {"reason": "wrong data", "by": "user:operator-acme"},
    )
    event = _only_audit("run.cancel")
    assert (event.outcome, event.object_id, event.details["reason"]) == (
        "success",
        str(run.id),
        "wrong data",
    )


def test_cancelling_an_ended_run_shows_the_conflict(login, waiting):
    run, interrupt = waiting()
    client = login("operator")
    client.post(f"/console/runs/{run.id}/cancel/", {"reason": "once"})
    response = client.post(f"/console/runs/{run.id}/cancel/", {"reason": "twice"})
    assert response.status_code == 409
    assert "the run already ended (cancelled)" in response.content.decode()


def test_resume_needs_a_reason(login, needs_review):
    run, effect = needs_review()
    client = login("operator")
    response = client.post(f"/console/runs/{run.id}/resume/", {"reason": " "})
    assert response.status_code == 400
    assert "a reason is required to resume a run" in response.content.decode()
    assert Run.objects.get(id=run.id).status == "needs_review"
    response = client.post(f"/console/runs/{run.id}/resume/", {"reason": "checked by hand"})
    assert response.status_code == 302
    assert Run.objects.get(id=run.id).status == "queued"
    event = AuditEvent.objects.filter(action="run.resume", outcome="success").get()
    assert event.details["reason"] == "checked by hand"


def test_a_viewer_cannot_cancel_or_resume(login, waiting, needs_review):
    run, interrupt = waiting()
    review_run, effect = needs_review()
    viewer = login("viewer")
    page = viewer.get(f"/console/runs/{run.id}/").content.decode()
    assert 'id="cancel-form"' not in page
    assert 'id="resume-form"' not in page
    assert viewer.post(f"/console/runs/{run.id}/cancel/", {"reason": "x"}).status_code == 403
    assert viewer.post(f"/console/runs/{review_run.id}/resume/", {"reason": "x"}).status_code == 403
    assert Run.objects.get(id=run.id).status == "waiting"
    assert Run.objects.get(id=review_run.id).status == "needs_review"


def test_anonymous_post_is_refused_and_changes_nothing(waiting):
    run, interrupt = waiting()
    response = Client().post(f"/console/runs/{run.id}/cancel/", {"reason": "x"})
    assert response.status_code == 401
    assert Run.objects.get(id=run.id).status == "waiting"
    event = AuditEvent.objects.get()
    assert (event.action, event.outcome) == ("run.cancel", "denied")
