"""The base of every API view: one principal per request, querysets scoped before any handler.

A view declares the grant each method (or viewset action) needs in ``grants`` and how to scope
its rows in ``scope_queryset``; ``get_queryset`` is final, so no handler sees an unscoped row.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request

from openrath_project.api.audit import audit_note
from openrath_project.api.permissions import resolve_principal
from openrath_project.tenancy.principal import Principal


def grant_for(grants: dict[str, str], action: str | None, method: str) -> str | None:
    """The grant of an operation: ``"<action>.<METHOD>"``, then the action, then the method."""
    if action:
        for key in (f"{action}.{method}", action):
            if key in grants:
                return grants[key]
    return grants.get(method)


class ScopedAPIView(GenericAPIView):
    """Base API view. Subclasses set ``grants`` and implement ``scope_queryset``."""

    #: grant needed, by ``"<action>.<METHOD>"``, viewset action name or HTTP method (``HEAD``
    #: uses ``GET``'s).
    grants: ClassVar[dict[str, str]] = {}
    #: audit action names by viewset action or HTTP method, e.g. ``{"POST": "project.create"}``.
    audit_actions: ClassVar[dict[str, str]] = {}
    audit_object_type: ClassVar[str] = ""
    #: Only tells the OpenAPI generator the model (``Model.objects.none()``); never queried.
    queryset: Any = None

    def required_grant(self, request: Request) -> str | None:
        method = "GET" if request.method == "HEAD" else (request.method or "GET")
        return grant_for(self.grants, getattr(self, "action", None), method)

    @property
    def principal(self) -> Principal:
        return resolve_principal(self.request)

    def scope_queryset(self, principal: Principal) -> models.QuerySet[Any]:
        raise NotImplementedError(f"{type(self).__name__} must scope its queryset")

    def get_queryset(self) -> models.QuerySet[Any]:
        if getattr(self, "swagger_fake_view", False):  # OpenAPI generation: no request principal
            assert self.queryset is not None, f"{type(self).__name__} needs a schema queryset"
            return self.queryset.none()
        return self.scope_queryset(self.principal)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        method = request.method or "GET"
        name = grant_for(self.audit_actions, getattr(self, "action", None), method)
        if name or self.audit_object_type:
            audit_note(request, action=name, object_type=self.audit_object_type)
        super().initial(request, *args, **kwargs)

    def audit(self, **fields: Any) -> None:
        """Record what the request acted on; the audit middleware writes it with the outcome."""
        audit_note(self.request, **fields)
