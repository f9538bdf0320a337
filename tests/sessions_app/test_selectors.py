"""Session selectors: the chunk endpoints' one-query read (compiled once)."""

from __future__ import annotations

from typing import Any

import pytest

from sessions_app.models import Session
from sessions_app.selectors import session_list, session_with_project
from tests.factories import ProjectFactory, TenantFactory
from tests.factories.sessions import SessionFactory
from tests.factories.tenancy import principal_for
from tests.support import column_values

pytestmark = pytest.mark.django_db


def test_session_with_project_is_the_scoped_row_with_its_project(
    project: Any, django_assert_num_queries: Any
) -> None:
    session = SessionFactory(project=project, title="log", metadata={"k": [1]})
    principal = principal_for(project.tenant)
    expected = session_list(principal=principal).select_related("project").get(id=session.id)

    with django_assert_num_queries(1):
        found = session_with_project(principal=principal, session_id=session.id)
        assert found is not None
        assert found.project.slug == project.slug  # joined in: no second query

    assert isinstance(found, Session)
    assert column_values(found) == column_values(expected)
    assert column_values(found.project) == column_values(expected.project)


def test_session_with_project_keeps_the_principal_scope(project: Any) -> None:
    session = SessionFactory(project=project)
    other_project = ProjectFactory(tenant=project.tenant)
    other_tenant = TenantFactory()

    outsider = principal_for(other_tenant)
    assert session_with_project(principal=outsider, session_id=session.id) is None
    restricted = principal_for(project.tenant, projects=[other_project])
    assert session_with_project(principal=restricted, session_id=session.id) is None
    allowed = principal_for(project.tenant, projects=[other_project, project])
    found = session_with_project(principal=allowed, session_id=session.id)
    assert found is not None
    assert found.id == session.id
