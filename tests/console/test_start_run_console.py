"""The session page's "start a run" form: each concurrent-input policy from the browser, its
refusals shown on the page with nothing written, a viewer refused, another tenant's session a
404, and the audit rows as the API writes them."""

from __future__ import annotations

import pytest
from django.urls import reverse

from openrath_project.tenancy.models import AuditEvent
from runs_app.models import Run
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft

pytestmark = pytest.mark.django_db


@pytest.fixture
def conversation(project):
    return session_services.session_create(
        project=project,
        title="support chat",
        chunks=[make_draft(role="user", content={"text": "hello"})],
    )


def _start(client, session, **form):
    return client.post(reverse("console:session-start-run", args=[session.id]), form)


def test_the_session_page_offers_the_form_to_operators_only(login, registry, conversation):
    page = login("operator").get(reverse("console:session", args=[conversation.id]))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="start-run"' in html
    assert 'value="console_approval"' in html
    for policy in ("reject", "enqueue", "interrupt", "rollback"):
        assert f'<option value="{policy}"' in html
    viewer_page = login("viewer").get(reverse("console:session", args=[conversation.id]))
    assert 'id="start-run"' not in viewer_page.content.decode()


def test_a_start_queues_a_run_on_the_session_and_is_audited(login, registry, conversation):
    response = _start(
        login("operator"),
        conversation,
        workflow="console_approval",
        user_message="please ship it",
        state='{"note": "x"}',
        input_policy="",
    )
    run = Run.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("console:run", args=[run.id])
    assert (run.workflow, run.status, run.input_session_id) == (
        "console_approval",
        "queued",
        conversation.id,
    )
    assert run.state == {"note": "x"}
    audit = AuditEvent.objects.get(action="run.create")
    assert (audit.outcome, audit.object_id) == ("success", str(run.id))
    assert audit.details["via"] == "console"
    assert audit.details["workflow"] == "console_approval"


def test_reject_on_a_busy_session_is_a_409_on_the_page_and_writes_nothing(
    login, registry, conversation
):
    client = login("operator")
    _start(client, conversation, workflow="console_approval", state="{}", input_policy="")
    response = _start(
        client, conversation, workflow="console_approval", state='{"a": 1}', input_policy="reject"
    )
    assert response.status_code == 409
    html = response.content.decode()
    assert 'data-code="session_busy"' in html
    assert "{&quot;a&quot;: 1}" in html  # what was typed is kept
    assert Run.objects.count() == 1
    refused = AuditEvent.objects.filter(action="run.create").order_by("id").last()
    assert refused.outcome != "success"
    assert refused.details["error_code"] == "session_busy"


def test_enqueue_waits_for_the_active_run(login, registry, conversation):
    client = login("operator")
    _start(client, conversation, workflow="console_approval", state="{}")
    first = Run.objects.get()
    _start(client, conversation, workflow="console_approval", state="{}", input_policy="enqueue")
    second = Run.objects.exclude(id=first.id).get()
    assert (second.input_policy, second.after_run_id) == ("enqueue", first.id)
    audit = AuditEvent.objects.filter(action="run.create", outcome="success").order_by("id").last()
    assert audit.details["after_run"] == str(first.id)


@pytest.mark.parametrize(
    ("policy", "action"), [("interrupt", "run.interrupt"), ("rollback", "run.rollback")]
)
def test_interrupt_and_rollback_audit_each_run_they_stop(
    login, registry, conversation, policy, action
):
    client = login("operator")
    _start(client, conversation, workflow="console_approval", state="{}")
    first = Run.objects.get()
    _start(client, conversation, workflow="console_approval", state="{}", input_policy=policy)
    second = Run.objects.exclude(id=first.id).get()
    first.refresh_from_db()
    assert first.status == "cancelled"  # not executing: it stops at once
    assert first.superseded_by_id == second.id
    stopped = AuditEvent.objects.get(action=action, object_id=str(first.id))
    assert stopped.details == {"by_run": str(second.id), "input_policy": policy, "via": "console"}


@pytest.mark.parametrize(
    ("form", "code"),
    [
        ({"workflow": "no_such_workflow", "state": "{}"}, "unknown_workflow"),
        ({"workflow": "console_approval", "state": "{not json"}, "invalid"),
        ({"workflow": "console_approval", "state": "[1, 2]"}, "invalid"),
        ({"workflow": "console_approval", "state": "{}", "input_policy": "later"}, None),
    ],
)
def test_bad_input_is_a_400_on_the_page(login, registry, conversation, form, code):
    response = _start(login("operator"), conversation, **form)
    assert response.status_code == 400
    if code is not None:
        assert f'data-code="{code}"' in response.content.decode()
    assert not Run.objects.exists()


def test_a_viewer_is_refused_and_nothing_is_written(login, registry, conversation):
    response = _start(login("viewer"), conversation, workflow="console_approval", state="{}")
    assert response.status_code == 403
    assert not Run.objects.exists()


def test_another_tenants_session_is_a_404(login, registry, conversation, other_tenant, member):
    outsider = login(user=member("operator", tenant=other_tenant))
    response = _start(outsider, conversation, workflow="console_approval", state="{}")
    assert response.status_code == 404
    assert not Run.objects.exists()
