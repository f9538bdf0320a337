"""The one permission check of the API: who is calling (401), and does it hold the grant (403)."""

from __future__ import annotations

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request

from openrath_project.errors import NotAuthenticated, PermissionDenied
from openrath_project.jsonlog import set_log_context
from openrath_project.tenancy.models import ApiToken
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.services import principal_for_token, principal_for_user

TENANT_HEADER = "HTTP_X_OPENRATH_TENANT"
SESSION_TENANT_KEY = "openrath_tenant"


def resolve_principal(request: Request) -> Principal:
    """The principal of an authenticated request; raises 401/403 when there is none."""
    cached = getattr(request._request, "principal", None)
    if cached is not None:
        return cached
    if isinstance(request.auth, ApiToken):
        principal = principal_for_token(request.auth)
    elif request.user is not None and request.user.is_authenticated:
        tenant_ref = request.META.get(TENANT_HEADER) or request.session.get(SESSION_TENANT_KEY)
        found = principal_for_user(request.user, tenant_ref=tenant_ref)
        if found is None:
            raise PermissionDenied("this login is not a member of that tenant")
        principal = found
    else:
        raise NotAuthenticated("authentication required: send 'Authorization: Bearer <token>'")
    request._request.principal = principal  # type: ignore[attr-defined]
    # The rest of the request logs the tenant (RequestIdMiddleware resets the context).
    set_log_context(tenant=principal.tenant_id)
    return principal


class GrantRequired(permissions.BasePermission):
    """Checks the grant the view declares for this request (``view.required_grant(request)``)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = resolve_principal(request)
        grant_for = getattr(view, "required_grant", None)
        if grant_for is None:
            raise PermissionDenied("this endpoint declares no grant")  # fail closed
        grant = grant_for(request)
        if grant is not None:
            principal.require_grant(grant)
        return True
