"""Querysets compiled once (openrath_project/prepared.py): the same rows and instances as the
ORM's own queryset, on SQLite and PostgreSQL, and refusals for what cannot be prepared."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from openrath_project.prepared import PreparedQuery
from openrath_project.tenancy.models import Project
from openrath_project.tenancy.principal import Principal
from runs_app.models import Run
from sessions_app.models import Session
from tests.factories import ProjectFactory
from tests.factories.runs import RunFactory
from tests.factories.sessions import SessionFactory
from tests.factories.tenancy import principal_for
from tests.support import column_values

pytestmark = pytest.mark.django_db


def _sessions_in_scope() -> PreparedQuery[Session]:
    return PreparedQuery(
        Session,
        lambda principal, title: (
            Session.objects.for_principal(principal).filter(title=title).order_by("created_at")
        ),
        principal=Principal,
        title=str,
    )


def test_rows_are_the_querysets_own_instances(project):
    first = SessionFactory(project=project, title="same", metadata={"k": [1, {"x": None}]})
    second = SessionFactory(project=project, title="same")
    SessionFactory(project=project, title="other")
    principal = principal_for(project.tenant)
    prepared = _sessions_in_scope()
    expected = list(
        Session.objects.for_principal(principal).filter(title="same").order_by("created_at")
    )

    got = prepared.fetch(principal=principal, title="same")

    assert [s.id for s in got] == [first.id, second.id] == [s.id for s in expected]
    assert [column_values(s) for s in got] == [column_values(s) for s in expected]
    assert got[0].metadata == {"k": [1, {"x": None}]}  # the JSON column's converter ran
    assert all(not s._state.adding and s._state.db == "default" for s in got)
    assert prepared.first(principal=principal, title="same").id == first.id
    assert prepared.first(principal=principal, title="nothing") is None


def test_the_sql_is_compiled_once_and_the_values_change(project):
    prepared = _sessions_in_scope()
    principal = principal_for(project.tenant)
    SessionFactory(project=project, title="a")
    SessionFactory(project=project, title="b")
    assert [s.title for s in prepared.fetch(principal=principal, title="a")] == ["a"]
    with CaptureQueriesContext(connection) as queries:
        assert [s.title for s in prepared.fetch(principal=principal, title="b")] == ["b"]
    assert len(queries.captured_queries) == 1


def test_another_tenant_and_a_restricted_principal_see_their_scope_only(
    project, other_project, foreign_project
):
    prepared = _sessions_in_scope()
    mine = SessionFactory(project=project, title="t")
    theirs = SessionFactory(project=other_project, title="t")
    SessionFactory(project=foreign_project, title="t")
    tenant = project.tenant
    third = ProjectFactory(tenant=tenant, slug="third")
    for projects, expected in [
        (None, {mine.id, theirs.id}),
        ([], set()),
        ([project], {mine.id}),
        ([project, other_project], {mine.id, theirs.id}),
        ([third, other_project, project], {mine.id, theirs.id}),
        ([other_project], {theirs.id}),
    ]:
        principal = principal_for(tenant, projects=projects)
        got = {s.id for s in prepared.fetch(principal=principal, title="t")}
        orm = {s.id for s in Session.objects.for_principal(principal).filter(title="t")}
        assert got == orm == expected, projects
    stranger = principal_for(foreign_project.tenant)
    assert [s.project_id for s in prepared.fetch(principal=stranger, title="t")] == [
        foreign_project.id
    ]


def test_select_related_fills_the_related_objects(project):
    run = RunFactory(project=project)
    prepared: PreparedQuery[Run] = PreparedQuery(
        Run,
        lambda run_id: Run.objects.select_related("project", "project__tenant").filter(id=run_id),
        run_id=uuid.UUID,
    )
    found = prepared.first(run_id=run.id)
    assert found is not None
    with CaptureQueriesContext(connection) as queries:
        assert found.project.slug == project.slug
        assert found.project.tenant.slug == project.tenant.slug
    assert queries.captured_queries == []
    assert column_values(found) == column_values(Run.objects.get(id=run.id))


def test_a_value_used_twice_and_constants_in_the_query(project):
    session = SessionFactory(project=project)
    run = RunFactory(project=project, session=session)
    prepared: PreparedQuery[Run] = PreparedQuery(
        Run,
        lambda session_id: (
            Run.objects.filter(session_id=session_id, input_session_id__isnull=True, kind="run")
            | Run.objects.filter(input_session_id=session_id, kind="run")
        ),
        session_id=uuid.UUID,
    )
    assert [r.id for r in prepared.fetch(session_id=session.id)] == [run.id]
    assert prepared.fetch(session_id=uuid.uuid4()) == []


@pytest.mark.django_db(transaction=True)
def test_for_update_needs_a_transaction_on_every_call(project):
    session = SessionFactory(project=project)
    prepared: PreparedQuery[Session] = PreparedQuery(
        Session,
        lambda session_id: Session.objects.filter(id=session_id).select_for_update(),
        session_id=uuid.UUID,
    )
    with transaction.atomic():
        assert [s.id for s in prepared.fetch(session_id=session.id)] == [session.id]
    if connection.features.has_select_for_update:
        with pytest.raises(TransactionManagementError):
            prepared.fetch(session_id=session.id)


def test_what_cannot_be_prepared_is_refused_plainly(project):
    rewritten: PreparedQuery[Project] = PreparedQuery(
        Project, lambda slug: Project.objects.filter(slug__icontains=slug), slug=str
    )
    with pytest.raises(ImproperlyConfigured, match="not among the query's parameters"):
        rewritten.fetch(slug="res")
    prefetching: PreparedQuery[Session] = PreparedQuery(
        Session,
        lambda session_id: Session.objects.filter(id=session_id).prefetch_related("chunks"),
        session_id=uuid.UUID,
    )
    with pytest.raises(ImproperlyConfigured, match="prefetch_related"):
        prefetching.fetch(session_id=uuid.uuid4())
    values: PreparedQuery[Any] = PreparedQuery(
        Session,
        lambda session_id: Session.objects.filter(id=session_id).values("id"),
        session_id=uuid.UUID,
    )
    with pytest.raises(ImproperlyConfigured):
        values.fetch(session_id=uuid.uuid4())
    by_slug: PreparedQuery[Project] = PreparedQuery(
        Project, lambda slug: Project.objects.filter(slug=slug), slug=str
    )
    with pytest.raises(TypeError, match="slug must be a str"):
        by_slug.fetch(slug=uuid.uuid4())
    with pytest.raises(TypeError, match="takes"):
        by_slug.fetch(slug="x", other=1)


def test_the_selectors_answer_as_before(project, other_project, foreign_project):
    from openrath_project.errors import NotFound
    from openrath_project.tenancy.selectors import project_get
    from sessions_app.selectors import session_get

    principal = principal_for(project.tenant)
    assert project_get(principal=principal, ref="research").id == project.id
    assert project_get(principal=principal, ref=str(other_project.id)).id == other_project.id
    restricted = principal_for(project.tenant, projects=[project])
    with pytest.raises(NotFound):
        project_get(principal=restricted, ref="ops")
    with pytest.raises(NotFound):
        project_get(principal=principal, ref=str(foreign_project.id))
    session = SessionFactory(project=other_project)
    assert session_get(principal=principal, session_id=session.id, lineage=False).id == session.id
    with pytest.raises(NotFound):
        session_get(principal=restricted, session_id=session.id, lineage=False)


def test_get_is_the_one_row_or_the_querysets_errors(project):
    SessionFactory(project=project, title="twice")
    SessionFactory(project=project, title="twice")
    once = SessionFactory(project=project, title="once")
    by_title: PreparedQuery[Session] = PreparedQuery(
        Session, lambda title: Session.objects.filter(title=title), title=str
    )
    assert by_title.get(title="once").id == once.id
    with pytest.raises(Session.DoesNotExist):
        by_title.get(title="never")
    with pytest.raises(Session.MultipleObjectsReturned):
        by_title.get(title="twice")
    wrong: PreparedQuery[Session] = PreparedQuery(
        Session, lambda title: Project.objects.filter(slug=title), title=str
    )
    with pytest.raises(ImproperlyConfigured, match="queryset is of Project"):
        wrong.fetch(title="x")
