"""Scoped reads of tenancy objects. Every function takes the principal."""

from __future__ import annotations

import uuid

from django.db.models import Q, QuerySet

from openrath_project.errors import NotFound
from openrath_project.tenancy.models import AuditEvent, Project
from openrath_project.tenancy.principal import Principal


def parse_uuid(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        return None


def project_list(*, principal: Principal) -> QuerySet[Project]:
    """Projects of the principal's tenant, limited to its project scope."""
    qs = Project.objects.filter(tenant_id=principal.tenant_id)
    if principal.project_ids is not None:
        qs = qs.filter(id__in=principal.project_ids)
    return qs


def project_get(*, principal: Principal, ref: object) -> Project:
    """A project in scope by id or slug; 404 otherwise (also for other tenants' projects)."""
    if isinstance(ref, Project):
        principal.check_project(ref)
        return ref
    as_uuid = parse_uuid(ref)
    if as_uuid is None and "\x00" in str(ref):  # no slug holds NUL (and PostgreSQL refuses it)
        raise NotFound("project not found", details={"project": str(ref).replace("\x00", "\ufffd")})
    condition = Q(id=as_uuid) if as_uuid is not None else Q(slug=str(ref))
    project = project_list(principal=principal).filter(condition).first()
    if project is None:
        raise NotFound("project not found", details={"project": str(ref)})
    return project


def audit_list(*, principal: Principal) -> QuerySet[AuditEvent]:
    """Audit events of the principal's tenant (and its projects, when the token is restricted)."""
    qs = AuditEvent.objects.filter(tenant_id=principal.tenant_id)
    if principal.project_ids is not None:
        qs = qs.filter(project_id__in=principal.project_ids)
    return qs.select_related("project")
