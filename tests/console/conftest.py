"""Console fixtures: users with each role, logged-in clients, runs waiting for a person."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from effects_app.models import EffectRecord
from openrath_project.tenancy.models import Project, Tenant
from runs_app import reconciler, registration
from runs_app import services as run_services
from runs_app.models import Interrupt, Run
from runs_app.registry import WorkflowRegistry
from tests.console import workflows
from tests.factories import MembershipFactory, UserFactory
from tests.runs_app.conftest import drive

PASSWORD = "correct-horse-battery"


@pytest.fixture
def registry(monkeypatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([workflows.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    workflows.SENT.clear()
    workflows.CRASH["send"] = False
    return fresh


@pytest.fixture
def member(tenant: Tenant) -> Callable[..., Any]:
    """``member(role, tenant=..., username=...)`` -> a user with that role in the tenant."""

    def make(role: str, *, tenant: Tenant = tenant, username: str | None = None) -> Any:
        user = UserFactory(username=username or f"{role}-{tenant.slug}")
        user.save()  # the factory sets the password without saving it
        MembershipFactory(user=user, tenant=tenant, role=role)
        return user

    return make


@pytest.fixture
def login(member) -> Callable[..., Client]:
    """``login(role)`` -> a test client logged in as a member with that role."""

    def make(role: str = "operator", *, user: Any = None, **kwargs: Any) -> Client:
        client = Client(**kwargs)
        client.force_login(user or member(role))
        return client

    return make


def start(registry: WorkflowRegistry, project: Project, name: str, state: dict) -> Run:
    run, _ = run_services.run_create(project=project, workflow=registry.get(name), state=state)
    return run


@pytest.fixture
def waiting(transactional_db, registry, project) -> Callable[..., tuple[Run, Interrupt]]:
    """``waiting(project=..., **state)`` -> a run waiting on its approval interrupt.

    The worker closes its database connection after a step, so these tests commit for real
    (``transactional_db``), as the runs tests do."""

    def make(project: Project = project, **state: Any) -> tuple[Run, Interrupt]:
        run = start(registry, project, "console_approval", dict(state))
        run = drive(registry, run.id)
        assert run.status == "waiting"
        return run, Interrupt.objects.get(run=run)

    return make


@pytest.fixture
def needs_review(transactional_db, registry, project) -> Callable[..., tuple[Run, EffectRecord]]:
    """``needs_review(project=...)`` -> a run stopped on an ambiguous non-idempotent effect."""

    def make(project: Project = project) -> tuple[Run, EffectRecord]:
        run = start(registry, project, "console_effect", {"to": "ops@example.com"})
        workflows.CRASH["send"] = True
        with pytest.raises(KeyboardInterrupt):
            drive(registry, run.id)
        Run.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
        reconciler.reconcile()
        run = drive(registry, run.id)
        assert run.status == "needs_review"
        return run, EffectRecord.objects.get(run=run)

    return make
