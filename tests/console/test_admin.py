"""The Django admin as an operations console: scoped for staff, engine rows read-only, state
changes only through actions that call the services and write audit rows."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.test import Client

from effects_app.models import EffectRecord
from memory_app import services as memory_services
from openrath_project.jsontext import digest
from openrath_project.tenancy.models import ApiToken, AuditEvent, Membership, Project
from openrath_project.tenancy.services import audit_record, token_create
from runs_app.models import Checkpoint, Interrupt, Run, RunEvent
from sessions_app.services import session_from_user_message
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

ADMIN = f"/{settings.ADMIN_PATH}"
APPS = ["tenancy", "sessions_app", "runs_app", "effects_app", "memory_app"]


@pytest.fixture
def superuser_client(django_user_model) -> Client:
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def staff(tenant):
    """``staff(role)`` -> a client of a non-superuser staff member of ``acme`` with that role,
    holding every model permission of the project's apps (the scope is what limits it)."""

    def make(role: str = "operator", username: str | None = None) -> Client:
        user = UserFactory(username=username or f"staff-{role}", is_staff=True)
        user.save()
        user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=APPS))
        MembershipFactory(user=user, tenant=tenant, role=role)
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def two_tenants(waiting, needs_review, project, foreign_project, tenant, other_tenant):
    """Engine rows in both tenants."""
    mine = {"waiting": waiting(project=project), "review": needs_review(project=project)}
    theirs = {
        "waiting": waiting(project=foreign_project),
        "review": needs_review(project=foreign_project),
    }
    memory_services.memory_remember(project=project, text="Our fact.")
    memory_services.memory_remember(project=foreign_project, text="Their fact.")
    token_create(tenant=tenant, name="mine", grants=["runs:read"])
    token_create(tenant=other_tenant, name="theirs", grants=["runs:read"])
    audit_record(actor="system", action="test.mine", outcome="success", tenant=tenant)
    audit_record(actor="system", action="test.theirs", outcome="success", tenant=other_tenant)
    return mine, theirs


def _changelist(client: Client, model: str) -> str:
    response = client.get(f"{ADMIN}{model}/")
    assert response.status_code == 200, model
    return response.content.decode()


def _rows(client: Client, model: str) -> set[str]:
    """Primary keys of the rows a changelist links to."""
    body = _changelist(client, model)
    return set(re.findall(rf'href="{ADMIN}{model}/([^/"]+)/change/', body))


def test_every_model_is_registered(superuser_client):
    index = superuser_client.get(ADMIN).content.decode()
    for path in (
        "tenancy/tenant/",
        "tenancy/project/",
        "tenancy/membership/",
        "tenancy/apitoken/",
        "tenancy/auditevent/",
        "sessions_app/session/",
        "sessions_app/chunk/",
        "sessions_app/lineageedge/",
        "runs_app/workflowplan/",
        "runs_app/run/",
        "runs_app/runevent/",
        "runs_app/checkpoint/",
        "runs_app/interrupt/",
        "effects_app/effectrecord/",
        "memory_app/memoryentry/",
        "memory_app/memorystats/",
    ):
        assert f'href="{ADMIN}{path}"' in index, path
        assert superuser_client.get(f"{ADMIN}{path}").status_code == 200, path


def test_superusers_see_every_tenant(superuser_client, two_tenants):
    mine, theirs = two_tenants
    runs = _rows(superuser_client, "runs_app/run")
    assert {str(mine["waiting"][0].id), str(theirs["waiting"][0].id)} <= runs
    assert len(runs) == 4


def test_staff_see_only_their_tenants_rows(staff, two_tenants, tenant, other_tenant):
    mine, theirs = two_tenants
    client = staff("operator")
    mine_run, mine_interrupt = mine["waiting"]
    their_run, their_interrupt = theirs["waiting"]
    assert _rows(client, "runs_app/run") == {
        str(mine_run.id),
        str(mine["review"][0].id),
    }
    assert _rows(client, "runs_app/interrupt") == {str(mine_interrupt.id)}
    assert _rows(client, "effects_app/effectrecord") == {str(mine["review"][1].id)}
    assert _rows(client, "tenancy/tenant") == {str(tenant.id)}
    own_projects = _rows(client, "tenancy/project")
    assert own_projects == {str(mine_run.project_id)}
    tokens = ApiToken.objects.filter(tenant=tenant).values_list("id", flat=True)
    assert _rows(client, "tenancy/apitoken") == {str(t) for t in tokens}
    audit = _changelist(client, "tenancy/auditevent")
    assert "test.mine" in audit
    assert "test.theirs" not in audit
    sessions = _rows(client, "sessions_app/session")
    assert str(mine_run.session_id) in sessions
    assert str(their_run.session_id) not in sessions
    own_events = RunEvent.objects.filter(run__tenant=tenant).values_list("id", flat=True)
    assert _rows(client, "runs_app/runevent") == {str(pk) for pk in own_events}
    own_checkpoints = Checkpoint.objects.filter(run__tenant=tenant).values_list("id", flat=True)
    assert _rows(client, "runs_app/checkpoint") == {str(pk) for pk in own_checkpoints}
    assert RunEvent.objects.filter(run__tenant=other_tenant).exists()
    memory = _changelist(client, "memory_app/memoryentry")
    assert "Our fact." in memory
    assert "Their fact." not in memory
    assert len(_rows(client, "memory_app/memorystats")) == 1
    assert _rows(client, "runs_app/workflowplan") == {
        mine_run.plan_id,
        mine["review"][0].plan_id,
    }
    # The tenant filter offers only their tenant; another tenant's row is not found.
    assert "globex" not in _changelist(client, "runs_app/run")
    response = client.get(f"{ADMIN}runs_app/run/{their_run.id}/change/")
    assert (response.status_code, response["Location"]) == (302, ADMIN)
    assert client.get(f"{ADMIN}runs_app/run/{mine_run.id}/change/").status_code == 200


def test_engine_rows_are_read_only(superuser_client, waiting):
    run, interrupt = waiting()
    for model, pk in (("runs_app/run", run.id), ("runs_app/interrupt", interrupt.id)):
        assert superuser_client.get(f"{ADMIN}{model}/add/").status_code == 403
        response = superuser_client.post(f"{ADMIN}{model}/{pk}/change/", {"status": "succeeded"})
        assert response.status_code == 403
        assert (
            superuser_client.post(f"{ADMIN}{model}/{pk}/delete/", {"post": "yes"}).status_code
            == 403
        )
    detail = superuser_client.get(f"{ADMIN}runs_app/interrupt/{interrupt.id}/change/")
    assert detail.status_code == 200
    # Large JSON is shown read-only and pretty.
    assert '<pre class="openrath-json"' in detail.content.decode()
    assert "&quot;release&quot;: &quot;1.2&quot;" in detail.content.decode()
    assert Run.objects.get(id=run.id).status == "waiting"
    assert Interrupt.objects.get(id=interrupt.id).status == "pending"


def _action(client: Client, model: str, action: str, ids: list, **extra: str):
    return client.post(
        f"{ADMIN}{model}/",
        {"action": action, "_selected_action": [str(i) for i in ids], **extra},
    )


def test_cancel_action_asks_for_a_reason_calls_the_service_and_audits(superuser_client, waiting):
    run, interrupt = waiting()
    form = _action(superuser_client, "runs_app/run", "cancel_runs", [run.id])
    assert form.status_code == 200
    assert 'name="reason"' in form.content.decode()
    assert Run.objects.get(id=run.id).status == "waiting"
    before = AuditEvent.objects.count()
    response = _action(
        superuser_client, "runs_app/run", "cancel_runs", [run.id], apply="yes", reason="bad input"
    )
    assert response.status_code == 302
    assert Run.objects.get(id=run.id).status == "cancelled"
    rows = list(AuditEvent.objects.order_by("id"))[before:]
    assert [(r.action, r.outcome, r.object_id) for r in rows] == [
        ("run.cancel", "success", str(run.id))
    ]
    assert rows[0].details == {"via": "admin", "reason": "bad input"}
    assert (rows[0].actor, rows[0].tenant_id, rows[0].project_id) == (
        "user:root",
        run.tenant_id,
        run.project_id,
    )


def test_resume_action_needs_a_reason(superuser_client, needs_review):
    run, effect = needs_review()
    empty = _action(superuser_client, "runs_app/run", "resume_runs", [run.id], apply="yes")
    assert empty.status_code == 200
    assert "This field is required." in empty.content.decode()
    assert Run.objects.get(id=run.id).status == "needs_review"
    done = _action(
        superuser_client, "runs_app/run", "resume_runs", [run.id], apply="yes", reason="checked"
    )
    assert done.status_code == 302
    assert Run.objects.get(id=run.id).status == "queued"
    assert AuditEvent.objects.filter(action="run.resume", outcome="success").count() == 1


def _shown_digests(page: str) -> dict[str, str]:
    """Row key -> the request digest a confirmation page posts back for it."""
    return dict(re.findall(r'name="request_digest:([^"]+)" value="([0-9a-f]{64})"', page))


def _confirm(client: Client, model: str, action: str, ids: list, **extra: str):
    """Choose the action, then submit its confirmation page as shown (digests included)."""
    page = _action(client, model, action, ids)
    assert page.status_code == 200
    digests = _shown_digests(page.content.decode())
    assert set(digests) == {str(i) for i in ids}
    posted = {f"request_digest:{pk}": value for pk, value in digests.items()}
    return _action(client, model, action, ids, apply="yes", **posted, **extra)


def test_interrupt_actions(superuser_client, waiting):
    run, needs_note = waiting()
    plain_run, plain = waiting(schema=None)
    form = _action(superuser_client, "runs_app/interrupt", "reject", [needs_note.id])
    assert form.status_code == 200
    page = form.content.decode()
    assert f"<code>{needs_note.request_digest}</code>" in page
    assert "&quot;title&quot;: &quot;Ship release 1.2?&quot;" in page
    assert _shown_digests(page) == {str(needs_note.id): needs_note.request_digest}
    assert Interrupt.objects.get(id=needs_note.id).status == "pending"
    refused = _confirm(superuser_client, "runs_app/interrupt", "approve", [needs_note.id])
    assert refused.status_code == 302
    assert Interrupt.objects.get(id=needs_note.id).status == "pending"
    failure = AuditEvent.objects.get(action="interrupt.resolve", outcome="failure")
    assert failure.details["error"].startswith("this approval needs a response (required: note)")
    _confirm(superuser_client, "runs_app/interrupt", "approve", [plain.id])
    _confirm(superuser_client, "runs_app/interrupt", "reject", [needs_note.id], reason="no")
    plain.refresh_from_db()
    needs_note.refresh_from_db()
    assert (plain.status, plain.decision, plain.resolved_by) == ("resolved", "approve", "user:root")
    assert (needs_note.status, needs_note.decision, needs_note.reason) == (
        "resolved",
        "reject",
        "no",
    )
    successes = AuditEvent.objects.filter(action="interrupt.resolve", outcome="success")
    assert sorted(e.details["request_digest"] for e in successes) == sorted(
        [plain.request_digest, needs_note.request_digest]
    )


def test_an_admin_decision_is_bound_to_the_request_its_page_showed(superuser_client, waiting):
    """The confirmation page shows the request (escaped) and posts its digest back; a request
    changed in between is a digest_mismatch and nothing is decided; a POST that carries no
    digest for a row (the page never listed it) decides nothing either."""
    run, interrupt = waiting(schema=None)
    hostile = {"title": "<script>alert(1)</script>", "amount": 10}
    Interrupt.objects.filter(id=interrupt.id).update(
        request=hostile, request_digest=digest(hostile)
    )
    page = _action(superuser_client, "runs_app/interrupt", "approve", [interrupt.id])
    body = page.content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert _shown_digests(body) == {str(interrupt.id): digest(hostile)}

    # Someone changes the request while the page is open: the decision is refused.
    changed = {"title": "<script>alert(1)</script>", "amount": 10_000}
    Interrupt.objects.filter(id=interrupt.id).update(
        request=changed, request_digest=digest(changed)
    )
    before = AuditEvent.objects.count()
    stale = _action(
        superuser_client,
        "runs_app/interrupt",
        "approve",
        [interrupt.id],
        apply="yes",
        **{f"request_digest:{interrupt.id}": digest(hostile)},
    )
    assert stale.status_code == 302
    shown = [str(m) for m in superuser_client.get(stale["Location"]).context["messages"]]
    assert shown == [
        f"{interrupt}: request_digest does not match the interrupt's request: reload and review"
    ]
    assert (Interrupt.objects.get(id=interrupt.id).status, Run.objects.get(id=run.id).status) == (
        "pending",
        "waiting",
    )
    (row,) = list(AuditEvent.objects.order_by("id"))[before:]
    assert (row.action, row.outcome, row.status_code, row.details["error_code"]) == (
        "interrupt.resolve",
        "failure",
        409,
        "digest_mismatch",
    )

    # No digest posted for the row: refused before the service is asked.
    _action(superuser_client, "runs_app/interrupt", "approve", [interrupt.id], apply="yes")
    assert Interrupt.objects.get(id=interrupt.id).status == "pending"
    missing = AuditEvent.objects.filter(action="interrupt.resolve").latest("id")
    assert (missing.outcome, missing.status_code, missing.details["error_code"]) == (
        "failure",
        400,
        "invalid",
    )

    # A fresh look binds the decision to the current request.
    _confirm(superuser_client, "runs_app/interrupt", "approve", [interrupt.id])
    interrupt.refresh_from_db()
    assert (interrupt.status, interrupt.decision) == ("resolved", "approve")
    assert Run.objects.get(id=run.id).status == "queued"
    done = AuditEvent.objects.filter(action="interrupt.resolve").latest("id")
    assert (done.outcome, done.details["request_digest"]) == ("success", digest(changed))


def test_effect_actions(superuser_client, needs_review):
    run, effect = needs_review()
    other_run, other = needs_review()
    page = _action(superuser_client, "effects_app/effectrecord", "mark_not_applied", [effect.id])
    assert "tests.console.workflows.send_mail" in page.content.decode()
    assert _shown_digests(page.content.decode()) == {str(effect.id): effect.request_digest}
    _confirm(superuser_client, "effects_app/effectrecord", "mark_not_applied", [effect.id])
    _confirm(superuser_client, "effects_app/effectrecord", "cancel_runs", [other.id])
    effect.refresh_from_db()
    other.refresh_from_db()
    assert (effect.status, effect.resolution) == ("resolved", "not_applied")
    assert Run.objects.get(id=run.id).status == "queued"
    assert (other.status, other.resolution) == ("resolved", "cancel_run")
    assert Run.objects.get(id=other_run.id).status == "cancelled"
    assert AuditEvent.objects.filter(action="effect.resolve", outcome="success").count() == 2


def test_an_effect_decision_needs_the_digest_its_page_showed(superuser_client, needs_review):
    run, effect = needs_review()
    url_action = ("effects_app/effectrecord", "mark_not_applied", [effect.id])
    _action(superuser_client, *url_action, apply="yes")
    stale = _action(
        superuser_client, *url_action, apply="yes", **{f"request_digest:{effect.id}": "0" * 64}
    )
    assert stale.status_code == 302
    assert (EffectRecord.objects.get(id=effect.id).status, Run.objects.get(id=run.id).status) == (
        "needs_review",
        "needs_review",
    )
    failures = AuditEvent.objects.filter(action="effect.resolve").order_by("id")
    assert [(f.outcome, f.status_code, f.details["error_code"]) for f in failures] == [
        ("failure", 400, "invalid"),
        ("failure", 409, "digest_mismatch"),
    ]


def test_token_revoke_needs_the_grant(staff, superuser_client, tenant):
    token, _ = token_create(tenant=tenant, name="ci", grants=["runs:read"])
    operator = staff("operator")
    _action(operator, "tenancy/apitoken", "revoke", [token.id])
    token.refresh_from_db()
    assert token.revoked_at is None
    denied = AuditEvent.objects.get(action="token.revoke")
    assert (denied.outcome, denied.details["required_grant"]) == ("denied", "tokens:manage")
    _action(superuser_client, "tenancy/apitoken", "revoke", [token.id])
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEvent.objects.filter(action="token.revoke", outcome="success").count() == 1


def test_a_viewer_on_staff_cannot_act(staff, waiting):
    run, interrupt = waiting()
    viewer = staff("viewer")
    _action(viewer, "runs_app/run", "cancel_runs", [run.id], apply="yes", reason="x")
    _action(viewer, "runs_app/interrupt", "reject", [interrupt.id], apply="yes")
    assert Run.objects.get(id=run.id).status == "waiting"
    assert Interrupt.objects.get(id=interrupt.id).status == "pending"
    denied = AuditEvent.objects.filter(outcome="denied").order_by("id")
    assert [(e.action, e.details["required_grant"]) for e in denied] == [
        ("run.cancel", "runs:cancel"),
        ("interrupt.resolve", "interrupts:resolve"),
    ]


def test_staff_cannot_act_on_another_tenants_rows(staff, two_tenants):
    mine, theirs = two_tenants
    their_run = theirs["waiting"][0]
    client = staff("admin")
    _action(client, "runs_app/run", "cancel_runs", [their_run.id], apply="yes", reason="x")
    assert Run.objects.get(id=their_run.id).status == "waiting"
    assert not AuditEvent.objects.filter(action="run.cancel").exists()


def test_memberships_are_managed_by_tenant_admins_only(staff, tenant, member):
    other = member("viewer", username="victor")
    membership = Membership.objects.get(user=other)
    operator = staff("operator")
    url = f"{ADMIN}tenancy/membership/{membership.id}/change/"
    response = operator.post(url, {"user": other.id, "tenant": tenant.id, "role": "admin"})
    assert response.status_code == 403
    assert Membership.objects.get(id=membership.id).role == "viewer"
    admin = staff("admin", username="staff-admin")
    response = admin.post(url, {"user": other.id, "tenant": tenant.id, "role": "operator"})
    assert response.status_code == 302
    assert Membership.objects.get(id=membership.id).role == "operator"


def test_effect_detail_shows_request_pretty(superuser_client, needs_review):
    run, effect = needs_review()
    body = superuser_client.get(f"{ADMIN}effects_app/effectrecord/{effect.id}/change/")
    assert body.status_code == 200
    assert "tests.console.workflows.send_mail" in body.content.decode()
    assert EffectRecord.objects.get(id=effect.id).status == "needs_review"


def test_sessions_admin_is_read_only(superuser_client, project):
    session = session_from_user_message(project=project, text="hello")
    assert superuser_client.get(f"{ADMIN}sessions_app/session/add/").status_code == 403
    detail = superuser_client.get(f"{ADMIN}sessions_app/session/{session.id}/change/")
    assert detail.status_code == 200
    assert 'name="title"' not in detail.content.decode()


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_editing_a_row_takes_the_admin_role_whatever_the_model_permissions(staff, project, role):
    client = staff(role)
    url = f"{ADMIN}tenancy/project/{project.id}/change/"
    page = client.get(url)
    assert page.status_code == 200  # may look (view permission) ...
    assert b'name="_save"' not in page.content
    refused = client.post(
        url, {"slug": project.slug, "name": "renamed", "tenant": project.tenant_id}
    )
    assert refused.status_code == 403  # ... but not change
    project.refresh_from_db()
    assert project.name != "renamed"
    deleted = client.post(f"{ADMIN}tenancy/project/{project.id}/delete/", {"post": "yes"})
    assert deleted.status_code == 403


def test_a_tenant_admin_may_edit_its_rows(staff, project):
    client = staff("admin")
    url = f"{ADMIN}tenancy/project/{project.id}/change/"
    saved = client.post(url, {"slug": project.slug, "name": "renamed", "tenant": project.tenant_id})
    assert saved.status_code == 302, saved.content[:2000]
    project.refresh_from_db()
    assert project.name == "renamed"


# --- Writes: the target tenant, fixed owners, services only, audited under the tenant ----------


def _admin_of_acme_viewer_of_globex(staff, other_tenant) -> Client:
    """The red-team's user: admin in acme, only a viewer in globex."""
    client = staff("admin", username="acme-admin")
    user = Membership.objects.get(user__username="acme-admin").user
    MembershipFactory(user=user, tenant=other_tenant, role="viewer")
    return client


def _token_state(token: ApiToken) -> tuple:
    token = ApiToken.objects.get(pk=token.pk)
    return (
        token.tenant_id,
        token.name,
        sorted(token.grants),
        sorted(token.projects.values_list("id", flat=True)),
        token.revoked_at,
        token.expires_at,
        token.created_by_id,
    )


def test_a_token_cannot_be_moved_to_another_tenant(staff, tenant, other_tenant, foreign_project):
    client = _admin_of_acme_viewer_of_globex(staff, other_tenant)
    token, _ = token_create(tenant=tenant, name="deploy", grants=["*"])
    url = f"{ADMIN}tenancy/apitoken/{token.id}/change/"
    page = client.get(url).content.decode()
    # Only the name is a form field: tenant, grants, scope, expiry and revocation are shown.
    for name in ("tenant", "projects", "grants", "revoked_at", "expires_at", "created_by"):
        assert f'name="{name}' not in page, name
    assert 'name="name"' in page
    before = _token_state(token)
    response = client.post(
        url,
        {
            "name": "deploy",
            "tenant": other_tenant.id,
            "projects": [foreign_project.id],
            "grants": '["*"]',
            "revoked_at_0": "",
            "expires_at_0": "2999-01-01",
            "expires_at_1": "00:00:00",
        },
    )
    assert response.status_code == 302
    assert _token_state(token) == before
    renamed = client.post(url, {"name": "deploy-2"})
    assert renamed.status_code == 302
    assert _token_state(token) == (before[0], "deploy-2", *before[2:])


def test_revocation_cannot_be_undone_in_the_admin(superuser_client, tenant):
    token, _ = token_create(tenant=tenant, name="ci", grants=["runs:read"])
    _action(superuser_client, "tenancy/apitoken", "revoke", [token.id])
    revoked_at = ApiToken.objects.get(pk=token.pk).revoked_at
    assert revoked_at is not None
    url = f"{ADMIN}tenancy/apitoken/{token.id}/change/"
    response = superuser_client.post(
        url, {"name": "ci", "revoked_at_0": "", "revoked_at_1": "", "tenant": tenant.id}
    )
    assert response.status_code == 302
    assert ApiToken.objects.get(pk=token.pk).revoked_at == revoked_at


def test_a_project_cannot_be_moved_to_another_tenant(staff, project, other_tenant):
    client = _admin_of_acme_viewer_of_globex(staff, other_tenant)
    url = f"{ADMIN}tenancy/project/{project.id}/change/"
    assert 'name="tenant"' not in client.get(url).content.decode()
    response = client.post(url, {"slug": project.slug, "name": "moved", "tenant": other_tenant.id})
    assert response.status_code == 302
    stored = Project.objects.get(pk=project.pk)
    assert (stored.tenant_id, stored.name) == (project.tenant_id, "moved")


def _options(body: str, name: str) -> set[str]:
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', body, re.S)
    assert select is not None, f"no select {name!r}"
    return set(re.findall(r'<option value="([^"]+)"', select.group(1)))


def test_add_forms_offer_only_tenants_the_user_administers(staff, tenant, other_tenant):
    client = _admin_of_acme_viewer_of_globex(staff, other_tenant)
    for model in ("tenancy/project", "tenancy/membership"):
        page = client.get(f"{ADMIN}{model}/add/").content.decode()
        assert _options(page, "tenant") == {str(tenant.id)}, model
    projects = Project.objects.count()
    memberships = Membership.objects.count()
    victor = UserFactory(username="victor")
    victor.save()
    MembershipFactory(user=victor, tenant=other_tenant, role="viewer")
    for model, form in (
        ("tenancy/project", {"tenant": other_tenant.id, "slug": "planted", "name": "planted"}),
        ("tenancy/membership", {"tenant": other_tenant.id, "user": victor.pk, "role": "admin"}),
    ):
        refused = client.post(f"{ADMIN}{model}/add/", form)
        assert refused.status_code == 200, model  # the form again: not a valid choice
        assert "Select a valid choice" in refused.content.decode()
    assert Project.objects.count() == projects
    assert Membership.objects.count() == memberships + 1  # victor's own, made above
    assert Membership.objects.get(user=victor).role == "viewer"


def test_an_operator_or_viewer_everywhere_may_not_add(staff, other_tenant):
    client = staff("operator")
    assert client.get(f"{ADMIN}tenancy/project/add/").status_code == 403


def test_a_membership_keeps_its_user_and_tenant(staff, tenant, member, other_tenant):
    other = member("viewer", username="victor")
    intruder = member("viewer", username="ivan")
    membership = Membership.objects.get(user=other)
    client = _admin_of_acme_viewer_of_globex(staff, other_tenant)
    url = f"{ADMIN}tenancy/membership/{membership.id}/change/"
    response = client.post(url, {"user": intruder.id, "tenant": other_tenant.id, "role": "admin"})
    assert response.status_code == 302
    stored = Membership.objects.get(id=membership.id)
    assert (stored.user_id, stored.tenant_id, stored.role) == (other.id, tenant.id, "admin")


def test_admin_writes_are_audited_under_the_tenant(
    staff, tenant, project, make_token, client_for, other_tenant
):
    client = staff("admin", username="acme-admin")
    token, _ = token_create(tenant=tenant, name="deploy", grants=["runs:read"])
    before = AuditEvent.objects.count()
    client.post(f"{ADMIN}tenancy/apitoken/{token.id}/change/", {"name": "deploy-2"})
    client.post(
        f"{ADMIN}tenancy/project/{project.id}/change/", {"slug": "research", "name": "Renamed"}
    )
    client.post(
        f"{ADMIN}tenancy/project/add/", {"tenant": tenant.id, "slug": "added", "name": "Added"}
    )
    added = Project.objects.get(tenant=tenant, slug="added")
    spare = ProjectFactory(tenant=tenant, slug="spare")  # no audit rows keep it
    client.post(f"{ADMIN}tenancy/project/{spare.id}/delete/", {"post": "yes"})
    assert not Project.objects.filter(pk=spare.pk).exists()
    _action(client, "tenancy/apitoken", "revoke", [token.id])
    rows = list(AuditEvent.objects.order_by("id"))[before:]
    assert [
        (r.action, r.outcome, r.tenant_id, r.project_id, r.object_type, r.object_id, r.details)
        for r in rows
    ] == [
        ("apitoken.change", "success", tenant.id, None, "apitoken", str(token.id),
         {"via": "admin", "fields": ["name"]}),
        ("project.change", "success", tenant.id, project.id, "project", str(project.id),
         {"via": "admin", "fields": ["name"]}),
        ("project.add", "success", tenant.id, added.id, "project", str(added.id),
         {"via": "admin", "fields": ["name", "slug", "tenant"]}),
        ("project.delete", "success", tenant.id, None, "project", str(spare.id),
         {"via": "admin"}),
        ("token.revoke", "success", tenant.id, None, "token", str(token.id),
         {"via": "admin", "prefix": token.prefix,
          "revoked_at": str(ApiToken.objects.get(pk=token.pk).revoked_at)}),
    ]  # fmt: skip
    assert {r.actor for r in rows} == {"user:acme-admin"}
    assert token.secret_hash not in repr([r.details for r in rows])
    # The tenant sees them in its own audit log; another tenant does not.
    listed = client_for(make_token(["audit:read"])).get("/api/v1/audit/").json()["results"]
    actions = [(e["action"], e["object_id"]) for e in listed]
    for row in rows:
        assert (row.action, row.object_id) in actions
    theirs = client_for(make_token(["audit:read"], tenant=other_tenant)).get("/api/v1/audit/")
    assert [e["action"] for e in theirs.json()["results"]] == []


def test_the_decision_page_shows_a_large_request_whole(superuser_client, needs_review):
    """The digest covers the whole request, so the page the decision is made on shows all of it
    (the change page may cut a long payload; the decision page never does)."""
    run, effect = needs_review()
    big = {"body": "x" * 60_000, "end": "the last words"}
    EffectRecord.objects.filter(id=effect.id).update(request=big)
    page = _action(superuser_client, "effects_app/effectrecord", "mark_not_applied", [effect.id])
    text = page.content.decode()
    assert "the last words" in text
    assert "more characters" not in text
