"""Run factories: a run queued by ``run_create`` and moved to the status a test needs, its
interrupts and checkpoints.

The runs are rows to read, list, filter and decide on (selectors, the API, the admin, the
console); their workflow is :class:`FactoryWorkflow`, registered in a registry of its own, so
no worker of a test executes them. A test of execution drives a real run through a registry
instead (``tests/runs_app/conftest.py``)."""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any

import factory
from django.utils import timezone

from openrath_project import flow
from openrath_project.jsontext import digest
from runs_app import services
from runs_app.models import Checkpoint, Interrupt, Run
from runs_app.registry import RegisteredWorkflow, WorkflowRegistry
from runs_app.transitions import STATUSES, TERMINAL
from tests.factories.base import ServiceFactory
from tests.factories.tenancy import ProjectFactory


class FactoryWorkflow(flow.Workflow):
    """One step that returns its state: the plan factory-made runs pin."""

    name = "factory_workflow"

    @flow.step(entry=True, effects="none")
    def only(self, state, ctx):
        return state


@cache
def factory_workflow() -> RegisteredWorkflow:
    return WorkflowRegistry().register(FactoryWorkflow)


def _status_fields(status: str) -> dict[str, Any]:
    """What a run in ``status`` carries besides its status (a running run holds a lease: the
    database insists; a finished one has ended)."""
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}; statuses: {', '.join(STATUSES)}")
    now = timezone.now()
    if status == "running":
        return {
            "lease_owner": "factory-worker",
            "lease_expires_at": now + timedelta(minutes=5),
            "fencing_token": 1,
            "started_at": now,
        }
    if status in TERMINAL:
        return {"started_at": now, "finished_at": now}
    if status == "needs_review":
        return {"review_reason": "an effect needs review"}
    return {}


class RunFactory(ServiceFactory):
    """``RunFactory(project=..., status="waiting", state={...})``: queued by ``run_create``
    (plan, working session, ``run.created`` event), then set to ``status``; other keyword
    arguments are model fields to set with it (``output=...``)."""

    class Meta:
        model = Run

    project = factory.SubFactory(ProjectFactory)
    status = "queued"
    state = factory.LazyFunction(dict)
    workflow = None

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Run:
        project, status = kwargs.pop("project"), kwargs.pop("status")
        run, _ = services.run_create(
            project=project,
            workflow=kwargs.pop("workflow") or factory_workflow(),
            state=kwargs.pop("state"),
            created_by="test:factory",
        )
        if status != "queued" or kwargs:
            Run.objects.filter(id=run.id).update(status=status, **_status_fields(status), **kwargs)
            run.refresh_from_db()
        return run


class InterruptFactory(factory.django.DjangoModelFactory):
    """A pending approval of a waiting run, its digest that of its request (as
    ``interrupt_request`` stores it)."""

    class Meta:
        model = Interrupt

    run = factory.SubFactory(RunFactory, status="waiting")
    tenant_id = factory.SelfAttribute("run.tenant_id")
    project_id = factory.SelfAttribute("run.project_id")
    step = "only"
    checkpoint_seq = factory.SelfAttribute("run.checkpoint_seq")
    sequence = factory.Sequence(lambda n: n)
    kind = "approval"
    request = factory.Sequence(lambda n: {"title": f"Approve change {n}?", "change": n})
    request_digest = factory.LazyAttribute(lambda o: digest(o.request))
    title = factory.LazyAttribute(lambda o: str(o.request.get("title", "approval requested")))
    schema = None


class CheckpointFactory(factory.django.DjangoModelFactory):
    """A full checkpoint of ``run`` after its only step, holding ``state``."""

    class Meta:
        model = Checkpoint

    run = factory.SubFactory(RunFactory, status="running")
    seq = factory.Sequence(lambda n: n + 1)
    step = "only"
    full = True
    state = factory.LazyFunction(dict)
    state_digest = factory.LazyAttribute(lambda o: digest(o.state))
    next_nodes = factory.LazyFunction(list)
    session_id = factory.SelfAttribute("run.session_id")
    session_len = factory.SelfAttribute("run.session_len")
    fencing_token = factory.SelfAttribute("run.fencing_token")
    attempt = factory.SelfAttribute("run.attempt")
