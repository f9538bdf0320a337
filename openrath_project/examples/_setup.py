"""Shared set-up of the examples: Django, and an ``examples`` tenant and project."""

from __future__ import annotations

import os
from typing import Any


def django_ready() -> None:
    """Configure Django (embedded profile by default) and apply migrations if needed."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openrath_project.settings")
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)


def example_project() -> Any:
    """The ``examples/examples`` project (created on first use)."""
    from openrath_project.tenancy.models import Project, Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="examples", defaults={"name": "Examples"})
    project, _ = Project.objects.get_or_create(
        tenant=tenant, slug="examples", defaults={"name": "Examples"}
    )
    return project


def provider(fixture: Any) -> Any:
    """The scripted provider (or the real model when ``OPENAI_API_KEY`` is set and
    ``OPENRATH_EXAMPLES_USE_OPENAI=1``)."""
    from openrath_project import flow

    if os.environ.get("OPENAI_API_KEY") and os.environ.get("OPENRATH_EXAMPLES_USE_OPENAI") == "1":
        return flow.Provider("openai")
    return flow.Provider("scripted", fixture=fixture)
