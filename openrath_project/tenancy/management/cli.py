"""Shared plumbing of the operator CLI: readable errors, the CLI actor, audit of CLI actions."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.management.base import CommandError

from openrath_project.errors import DomainError
from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.services import audit_record

T = TypeVar("T")


def cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no login name in some containers
        return "cli:unknown"


def call_service(fn: Callable[..., T], **kwargs: Any) -> T:
    """Call a service; a domain error becomes a CommandError (non-zero exit, readable message)."""
    try:
        return fn(**kwargs)
    except DomainError as exc:
        raise CommandError(exc.message) from exc


def get_tenant(slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise CommandError(f"no tenant with slug {slug!r}")
    return tenant


def get_project(tenant: Tenant, slug: str) -> Project:
    project = Project.objects.filter(tenant=tenant, slug=slug).first()
    if project is None:
        raise CommandError(f"no project {slug!r} in tenant {tenant.slug!r}")
    return project


def audit_cli(
    *,
    action: str,
    tenant: Tenant | None,
    object_type: str,
    object_id: str,
    project: Project | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    audit_record(
        actor=cli_actor(),
        action=action,
        outcome="success",
        tenant=tenant,
        project=project,
        object_type=object_type,
        object_id=object_id,
        details=details,
    )
