"""Run selectors: the run endpoints' one-query lookup and the resolve's (compiled once)."""

from __future__ import annotations

from typing import Any

import pytest

from openrath_project.errors import NotFound
from runs_app.api.serializers import RunOut
from runs_app.models import Run, RunFork
from runs_app.selectors import interrupt_get, run_for_view, run_list
from tests.factories import ProjectFactory, TenantFactory
from tests.factories.runs import InterruptFactory, RunFactory
from tests.factories.tenancy import principal_for
from tests.support import column_values

pytestmark = pytest.mark.django_db


def test_run_for_view_reads_the_run_its_project_and_its_fork_edge_in_one_query(
    project: Any, django_assert_num_queries: Any
) -> None:
    parent = RunFactory(project=project, status="succeeded")
    child = RunFactory(project=project)
    RunFork.objects.create(
        tenant=project.tenant,
        project=project,
        parent=parent,
        child=child,
        checkpoint_seq=2,
        created_by="test:fork",
        reason="try again",
    )
    principal = principal_for(project.tenant)

    for run, forked in ((child, True), (parent, False)):
        expected = run_list(principal=principal).get(id=run.id)
        with django_assert_num_queries(1):
            found = run_for_view(principal=principal, run_id=str(run.id))
            assert found.project.slug == project.slug
            block = RunOut(found).data["forked_from"]  # no query for the edge, present or not
        assert column_values(found) == column_values(expected)
        assert block == RunOut(expected).data["forked_from"]
        assert (block is not None) is forked
    assert RunOut(run_for_view(principal=principal, run_id=child.id)).data["forked_from"] == {
        **RunOut(run_list(principal=principal).get(id=child.id)).data["forked_from"],
        "run": str(parent.id),
        "checkpoint": 2,
    }


def test_run_for_view_is_404_outside_the_principal_scope(project: Any) -> None:
    run = RunFactory(project=project)
    other_project = ProjectFactory(tenant=project.tenant)
    for principal in (
        principal_for(TenantFactory()),
        principal_for(project.tenant, projects=[other_project]),
    ):
        with pytest.raises(NotFound):
            run_for_view(principal=principal, run_id=run.id)
    with pytest.raises(NotFound):
        run_for_view(principal=principal_for(project.tenant), run_id="not-a-uuid")
    assert isinstance(run_for_view(principal=principal_for(project.tenant), run_id=run.id), Run)


def test_a_resolve_reads_the_interrupt_its_project_and_locks_its_run_in_one_query(
    project: Any,
) -> None:
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    interrupt = InterruptFactory(run=RunFactory(project=project, status="waiting"))
    principal = principal_for(project.tenant)
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        found = interrupt_get(principal=principal, interrupt_id=str(interrupt.id), lock_run=True)
        assert (found.project.slug, found.run.status) == (project.slug, "waiting")
    (query,) = captured.captured_queries
    if connection.features.has_select_for_update_of:
        assert query["sql"].endswith('FOR UPDATE OF "runs_app_run"')  # the run's row alone
    assert column_values(found) == column_values(
        interrupt_get(principal=principal, interrupt_id=interrupt.id)
    )
    assert column_values(found.run) == column_values(Run.objects.get(id=interrupt.run_id))
    for outside in (
        principal_for(TenantFactory()),
        principal_for(project.tenant, projects=[ProjectFactory(tenant=project.tenant)]),
    ):
        with transaction.atomic(), pytest.raises(NotFound):
            interrupt_get(principal=outside, interrupt_id=interrupt.id, lock_run=True)
