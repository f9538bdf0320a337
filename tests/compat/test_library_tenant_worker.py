"""Item 1, the sharing rule: the server's embedded workers do not claim the library tenant's
runs (a script executes its own), and still claim every other tenant's."""

from __future__ import annotations

import pytest

from openrath_project import library
from runs_app import services
from runs_app.models import Run
from runs_app.worker import Worker
from tests.factories import ProjectFactory, TenantFactory
from tests.runs_app.conftest import registry  # noqa: F401  (the test workflows)

pytestmark = pytest.mark.django_db(transaction=True)


def test_embedded_worker_leaves_library_runs_alone(registry, monkeypatch):  # noqa: F811
    from runs_app import worker as worker_module

    monkeypatch.setattr(worker_module, "workflows", lambda: registry)
    script_project = library.default_project()
    assert (script_project.tenant.slug, script_project.slug) == ("local", "default")
    server_project = ProjectFactory(tenant=TenantFactory(slug="acme"), slug="research")
    script_run, _ = services.run_create(
        project=script_project,
        workflow=registry.get("linear"),
        state={},
        priority=5,
        user_message="go",
    )
    server_run, _ = services.run_create(
        project=server_project, workflow=registry.get("linear"), state={}, user_message="go"
    )

    embedded = Worker(name="embedded:test", skip_tenants=(library.library_tenant_slug(),))
    assert embedded.run_once() is not None
    assert Run.objects.get(id=server_run.id).status == "succeeded"
    # Nothing more to do for it, although a higher-priority run is queued.
    assert embedded.run_once() is None
    assert Run.objects.get(id=script_run.id).status == "queued"
    assert Run.objects.get(id=script_run.id).lease_owner == ""

    # A worker without the rule (run_worker, the script itself) takes it.
    assert Worker(name="script").run_once() is not None
    assert Run.objects.get(id=script_run.id).status == "succeeded"


def test_start_embedded_workers_applies_the_rule(monkeypatch):
    from runs_app import worker as worker_module

    started: list[Worker] = []

    class NoThread:
        def __init__(self, target, name, daemon):
            self.target = target

        def start(self):
            started.append(self.target.__self__)

    monkeypatch.setattr(worker_module.threading, "Thread", NoThread)
    monkeypatch.setenv("OPENRATH_LIBRARY_TENANT", "scripts")
    try:
        workers = worker_module.start_embedded_workers(2)
        assert [w.skip_tenants for w in workers] == [("scripts",), ("scripts",)]
        assert started == workers
    finally:
        worker_module.stop_embedded_workers()
