"""openrath_project/tenancy/services.py, called directly: tenants, projects, memberships,
principals and the audit rows (tokens have their own file, test_tokens.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from openrath_project.errors import Conflict, NotFound, ValidationFailed
from openrath_project.tenancy import services
from openrath_project.tenancy.grants import grants_for_role
from openrath_project.tenancy.models import AuditEvent, Membership, Project, Tenant
from tests.factories import MembershipFactory, ProjectFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db


def _tenancy_state() -> tuple:
    return (
        sorted(Tenant.objects.values_list("slug", flat=True)),
        sorted(Project.objects.values_list("tenant__slug", "slug")),
        sorted(Membership.objects.values_list("tenant__slug", "user__username", "role")),
        get_user_model().objects.count(),
    )


class TestTenantsAndProjects:
    def test_a_tenant_is_named_after_its_slug_unless_told(self):
        plain = services.tenant_create(slug="initech")
        named = services.tenant_create(slug="hooli", name="Hooli XYZ")
        assert [(t.slug, t.name) for t in (plain, named)] == [
            ("initech", "initech"),
            ("hooli", "Hooli XYZ"),
        ]

    @pytest.mark.parametrize("slug", ["", "Acme", "-acme", "acme-", "a" * 64, "ac me", 7])
    def test_a_bad_slug_names_the_field_and_creates_nothing(self, slug, tenant):
        before = _tenancy_state()
        for create in (
            lambda: services.tenant_create(slug=slug),
            lambda: services.project_create(tenant=tenant, slug=slug),
        ):
            with pytest.raises(ValidationFailed) as caught:
                create()
            assert caught.value.details == {"slug": ["invalid slug"]}
        assert _tenancy_state() == before

    def test_a_taken_slug_is_a_conflict(self, tenant, project):
        before = _tenancy_state()
        with pytest.raises(Conflict, match="tenant 'acme' already exists"):
            services.tenant_create(slug="acme")
        with pytest.raises(Conflict, match="project 'research' already exists in this tenant"):
            services.project_create(tenant=tenant, slug="research")
        assert _tenancy_state() == before

    def test_project_slugs_are_unique_per_tenant_only(self, project, other_tenant):
        theirs = services.project_create(tenant=other_tenant, slug="research", name="Research")
        assert (theirs.tenant_id, theirs.slug, theirs.name) == (
            other_tenant.id,
            "research",
            "Research",
        )
        assert theirs.id != project.id


class TestMemberships:
    def test_a_new_user_joins_with_a_password(self, tenant):
        user, created = services.user_join_tenant(
            tenant=tenant, username="ada", role="operator", password="correct-horse-battery"
        )
        assert created is True
        assert user.check_password("correct-horse-battery")
        assert list(Membership.objects.values_list("user__username", "tenant__slug", "role")) == [
            ("ada", "acme", "operator")
        ]

    def test_an_existing_user_joins_another_tenant_without_a_password(self, tenant, other_tenant):
        first, _ = services.user_join_tenant(
            tenant=tenant, username="ada", role="admin", password="correct-horse-battery"
        )
        again, created = services.user_join_tenant(
            tenant=other_tenant, username="ada", role="viewer"
        )
        assert (again.pk, created) == (first.pk, False)
        assert sorted(Membership.objects.values_list("tenant__slug", "role")) == [
            ("acme", "admin"),
            ("globex", "viewer"),
        ]

    @pytest.mark.parametrize(
        ("kwargs", "error", "message"),
        [
            ({"username": "new", "role": "operator"}, ValidationFailed, "a password is required"),
            (
                {"username": "new", "role": "owner", "password": "x"},
                ValidationFailed,
                "unknown role",
            ),
            (
                {"username": "member", "role": "viewer"},
                Conflict,
                "already a member of tenant 'acme'",
            ),
        ],
    )
    def test_refusals_change_nothing(self, tenant, kwargs, error, message):
        MembershipFactory(user=UserFactory(username="member"), tenant=tenant)
        before = _tenancy_state()
        with pytest.raises(error, match=message):
            services.user_join_tenant(tenant=tenant, **kwargs)
        assert _tenancy_state() == before

    def test_a_role_changes_only_for_a_member(self, tenant, other_tenant):
        MembershipFactory(user=UserFactory(username="bob"), tenant=tenant, role="viewer")
        changed = services.membership_set_role(tenant=tenant, username="bob", role="admin")
        assert (changed.user.username, changed.role) == ("bob", "admin")
        before = _tenancy_state()
        with pytest.raises(NotFound, match="'bob' is not a member of tenant 'globex'"):
            services.membership_set_role(tenant=other_tenant, username="bob", role="admin")
        with pytest.raises(ValidationFailed, match="unknown role 'root'"):
            services.membership_set_role(tenant=tenant, username="bob", role="root")
        assert _tenancy_state() == before


class TestPrincipals:
    def test_a_users_principal_is_its_role_in_the_tenant_asked_for(self, tenant, other_tenant):
        user = UserFactory(username="carol")
        MembershipFactory(user=user, tenant=tenant, role="viewer")
        MembershipFactory(user=user, tenant=other_tenant, role="admin")
        first = services.principal_for_user(user)
        assert first is not None
        # No tenant asked for: the first by slug (acme before globex).
        assert (first.tenant, first.role, first.grants, first.project_ids, first.actor) == (
            tenant,
            "viewer",
            grants_for_role("viewer"),
            None,
            "user:carol",
        )
        for ref in ("globex", str(other_tenant.id)):
            chosen = services.principal_for_user(user, tenant_ref=ref)
            assert chosen is not None
            assert (chosen.tenant, chosen.role, chosen.grants) == (
                other_tenant,
                "admin",
                grants_for_role("admin"),
            )

    def test_no_principal_outside_the_users_tenants(self, tenant):
        user = UserFactory(username="dave")
        assert services.principal_for_user(user) is None
        MembershipFactory(user=user, tenant=tenant)
        stranger = TenantFactory(slug="umbrella")
        for ref in ("umbrella", str(stranger.id), "not-a-uuid-or-slug"):
            assert services.principal_for_user(user, tenant_ref=ref) is None

    def test_a_tokens_principal_carries_its_grants_and_projects(self, tenant, project):
        other = ProjectFactory(tenant=tenant, slug="ops")
        wide, _ = services.token_create(tenant=tenant, name="wide", grants=["runs:read"])
        narrow, _ = services.token_create(
            tenant=tenant, name="narrow", grants=["runs:read", "runs:write"], projects=[project]
        )
        everywhere = services.principal_for_token(wide)
        assert (everywhere.tenant, everywhere.grants, everywhere.project_ids, everywhere.actor) == (
            tenant,
            frozenset({"runs:read"}),
            None,
            f"token:{wide.prefix}",
        )
        scoped = services.principal_for_token(narrow)
        assert scoped.project_ids == frozenset({project.id})
        assert (scoped.allows_project(project.id), scoped.allows_project(other.id)) == (True, False)
        assert scoped.token == narrow


class TestAudit:
    def test_a_row_keeps_what_it_is_given_within_the_column_sizes(self, tenant, project):
        event = services.audit_record(
            actor="a" * 250,
            action="run.cancel",
            outcome="success",
            tenant=tenant,
            project=project,
            object_type="run",
            object_id="x" * 120,
            status_code=200,
            request_id="r" * 200,
            details={"reason": "stuck"},
        )
        event.refresh_from_db()
        assert (len(event.actor), len(event.object_id), len(event.request_id)) == (200, 100, 128)
        assert (event.tenant_id, event.project_id, event.details) == (
            tenant.id,
            project.id,
            {"reason": "stuck"},
        )

    def test_an_unknown_outcome_is_refused_before_writing(self, tenant):
        with pytest.raises(ValueError, match="unknown audit outcome 'maybe'"):
            services.audit_record(actor="x", action="y", outcome="maybe", tenant=tenant)
        assert not AuditEvent.objects.exists()

    def test_a_failed_login_is_audited_in_each_of_the_users_tenants(self, tenant, other_tenant):
        user = UserFactory(username="erin")
        MembershipFactory(user=user, tenant=tenant)
        MembershipFactory(user=user, tenant=other_tenant)
        rows = services.login_failure_record(
            username="erin", via="console", locked_out=True, request_id="req-1"
        )
        assert sorted((r.tenant_id, r.status_code) for r in rows) == sorted(
            [(tenant.id, 429), (other_tenant.id, 429)]
        )
        assert {(r.actor, r.action, r.outcome, r.object_id) for r in rows} == {
            ("anonymous", "login.failed", "denied", str(user.pk))
        }
        assert rows[0].details == {"username": "erin", "via": "console", "locked_out": True}

    def test_a_failed_login_of_no_member_is_not_audited_anywhere(self, tenant):
        UserFactory(username="loner").save()
        for name in ("loner", "nobody-at-all"):
            assert services.login_failure_record(username=name, via="admin", locked_out=False) == []
        assert not AuditEvent.objects.exists()
