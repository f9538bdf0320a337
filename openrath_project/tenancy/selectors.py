"""Scoped reads of tenancy objects. Every function takes the principal."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from openrath_project.errors import NotFound
from openrath_project.prepared import PreparedQuery
from openrath_project.tenancy.models import AuditEvent, Membership, Project
from openrath_project.tenancy.principal import Principal


def parse_uuid(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        return None


def project_list(*, principal: Principal) -> QuerySet[Project]:
    """Projects of the principal's tenant, limited to its project scope."""
    return Project.objects.for_principal(principal)


#: ``project_get``'s two lookups, compiled once (openrath_project/prepared.py): every API write
#: names its project.
_PROJECT_BY_ID: PreparedQuery[Project] = PreparedQuery(
    Project,
    lambda principal, ref: project_list(principal=principal).filter(id=ref),
    principal=Principal,
    ref=uuid.UUID,
)
_PROJECT_BY_SLUG: PreparedQuery[Project] = PreparedQuery(
    Project,
    lambda principal, ref: project_list(principal=principal).filter(slug=ref),
    principal=Principal,
    ref=str,
)


def project_get(*, principal: Principal, ref: object) -> Project:
    """A project in scope by id or slug; 404 otherwise (also for other tenants' projects)."""
    if isinstance(ref, Project):
        principal.check_project(ref)
        return ref
    as_uuid = parse_uuid(ref)
    if as_uuid is None and "\x00" in str(ref):  # no slug holds NUL (and PostgreSQL refuses it)
        raise NotFound("project not found", details={"project": str(ref).replace("\x00", "\ufffd")})
    if as_uuid is not None:
        project = _PROJECT_BY_ID.first(principal=principal, ref=as_uuid)
    else:
        project = _PROJECT_BY_SLUG.first(principal=principal, ref=str(ref))
    if project is None:
        raise NotFound("project not found", details={"project": str(ref)})
    return project


def memberships_of(*, user_id: int | str) -> QuerySet[Membership]:
    """A login's memberships in every tenant, by tenant slug (the console's tenant switcher)."""
    # scope: the user's own memberships, across tenants: choosing one is what sets the principal
    return (
        Membership.objects.unscoped()
        .filter(user_id=user_id)
        .select_related("tenant")
        .order_by("tenant__slug")
    )


def audit_list(*, principal: Principal) -> QuerySet[AuditEvent]:
    """Audit events of the principal's tenant (and its projects, when the token is restricted)."""
    return AuditEvent.objects.for_principal(principal).select_related("project")
