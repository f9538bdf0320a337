"""The principal: who is acting, in which tenant, with which grants and project scope.

Resolved once per request (API token or console login) and passed to every selector and service
that needs scoping (``Model.objects.for_principal(principal)``, tenancy/scoping.py). An
object outside the principal's scope is reported as missing (404).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from openrath_project.errors import NotFound, PermissionDenied

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from openrath_project.tenancy.models import ApiToken, Project, Tenant


@dataclass(frozen=True)
class Principal:
    """An authenticated actor bound to one tenant."""

    tenant: Tenant
    grants: frozenset[str]
    #: ``None``: every project of the tenant; otherwise only these project ids.
    project_ids: frozenset[uuid.UUID] | None
    actor: str
    user: AbstractBaseUser | None = None
    token: ApiToken | None = None
    role: str | None = None

    @property
    def tenant_id(self) -> uuid.UUID:
        return self.tenant.id

    @property
    def is_project_restricted(self) -> bool:
        return self.project_ids is not None

    def has_grant(self, grant: str) -> bool:
        return grant in self.grants

    def require_grant(self, grant: str) -> None:
        """Raise 403 when the grant is missing (the caller already proved who it is)."""
        if grant not in self.grants:
            raise PermissionDenied(
                f"this action needs the grant {grant!r}", details={"required_grant": grant}
            )

    def allows_project(self, project_id: uuid.UUID | None) -> bool:
        if project_id is None:
            return not self.is_project_restricted
        return self.project_ids is None or project_id in self.project_ids

    def check_project(self, project: Project) -> None:
        """404 unless the project is in scope: existence outside the scope never leaks."""
        if project.tenant_id != self.tenant.id or not self.allows_project(project.id):
            raise NotFound("project not found")

    def audit_fields(self) -> dict[str, Any]:
        return {"actor": self.actor, "tenant": self.tenant}
