"""The library's project and session look-ups stay in the tenant they are given.

``flow.Session`` acts for no principal (a script, a durable step). A tenant is given by a
``"tenant/project"`` reference, and by the write context's project: inside a durable step the
executor sets the run's project, and then nothing of another tenant is reachable by id, slug
or instance. Both tenants here have a project ``research``; only the other one has ``secret``.
"""

from __future__ import annotations

import pytest

from openrath_project import flow
from openrath_project.errors import NotFound
from openrath_project.tenancy.models import Project, Tenant
from sessions_app import context
from sessions_app.models import Session as Row
from sessions_app.value import resolve_project
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def secret(other_tenant: Tenant) -> Project:
    return ProjectFactory(tenant=other_tenant, slug="secret")


def test_a_tenant_qualified_slug_never_resolves_in_another_tenant(
    project: Project, foreign_project: Project, secret: Project
) -> None:
    assert resolve_project("acme/research") == project
    assert resolve_project("globex/research") == foreign_project
    with pytest.raises(NotFound, match="no project 'acme/secret'"):
        resolve_project("acme/secret")


def test_inside_a_tenants_context_another_tenants_project_is_not_found(
    project: Project, foreign_project: Project, secret: Project
) -> None:
    with context.writing(project=project):
        # The ambiguous slug is the context tenant's; the foreign-only one is no project.
        assert resolve_project("research") == project
        for ref in ("secret", "globex/secret", "globex/research", str(foreign_project.id)):
            with pytest.raises(NotFound):
                resolve_project(ref)
        with pytest.raises(NotFound, match="in this tenant"):
            resolve_project(foreign_project)
        before = Row.objects.filter(tenant=foreign_project.tenant).count()
        with pytest.raises(NotFound):
            flow.Session.from_user_message("leak?", project="globex/secret")
        assert Row.objects.filter(tenant=foreign_project.tenant).count() == before
    # Outside any context the library is the operator: the slug unique across tenants resolves.
    assert resolve_project("secret") == secret


def test_a_context_given_by_reference_binds_its_tenant_too(
    project: Project, foreign_project: Project
) -> None:
    with context.writing(project="acme/research"), pytest.raises(NotFound):
        resolve_project(str(foreign_project.id))


def test_loading_a_session_stays_in_the_contexts_tenant(
    project: Project, foreign_project: Project
) -> None:
    foreign = flow.Session.from_user_message("theirs", project=foreign_project)
    own = flow.Session.from_user_message("ours", project=project)
    with context.writing(project=project):
        assert flow.Session.load(own.id).id == own.id
        with pytest.raises(NotFound, match=f"no session {foreign.id}"):
            flow.Session.load(foreign.id)
    assert flow.Session.load(foreign.id).id == foreign.id
