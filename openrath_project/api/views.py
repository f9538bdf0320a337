"""The base of every API view: one principal per request, querysets scoped before any handler.

A view declares the grant each method (or viewset action) needs in ``grants`` and how to scope
its rows in ``scope_queryset``; ``get_queryset`` and ``get_object`` are final (a subclass that
overrides either is refused when its module is imported), so no handler sees an unscoped row.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request

from openrath_project.api.audit import audit_note
from openrath_project.api.permissions import resolve_principal
from openrath_project.errors import ValidationFailed
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
    #: The query parameters of the view's GET actions other than ``list`` (whose parameters are
    #: its filters and the cursor pagination's), e.g. ``{"events": ("after", "limit")}``. A GET
    #: action not named here takes none.
    action_query_params: ClassVar[dict[str, tuple[str, ...]]] = {}

    #: Methods a subclass may not override: every row a handler sees comes through them.
    FINAL_METHODS: ClassVar[tuple[str, ...]] = ("get_queryset", "get_object")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ScopedAPIView.FINAL_METHODS:
            # Resolved through the MRO: a mixin listed before this class overrides it too.
            if getattr(cls, name) is not getattr(ScopedAPIView, name):
                raise TypeError(
                    f"{cls.__module__}.{cls.__qualname__} overrides {name}(), which "
                    "ScopedAPIView keeps final so that every row is scoped: implement "
                    "scope_queryset(principal) instead (for one object, a selector's *_get)"
                )

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
        # After authentication and permissions: a caller without access learns nothing more.
        self.check_query_params(request)

    def allowed_query_params(self) -> set[str] | None:
        """The query parameters this GET operation reads (``None``: not checked)."""
        action = getattr(self, "action", None)
        if action == "list":
            allowed: set[str] = set()
            filterset_class = getattr(self, "filterset_class", None)
            if filterset_class is not None:
                allowed |= set(filterset_class.base_filters)
            paginator = self.paginator
            if paginator is not None:
                for name in ("cursor_query_param", "page_size_query_param"):
                    if getattr(paginator, name, None):
                        allowed.add(getattr(paginator, name))
            return allowed
        if action is None:
            return None
        return set(self.action_query_params.get(action, ()))

    def check_query_params(self, request: Request) -> None:
        """An unknown query parameter is a 400 naming it, never silently ignored (a misspelt
        filter would otherwise return everything)."""
        if request.method not in ("GET", "HEAD"):
            return
        allowed = self.allowed_query_params()
        if allowed is None:
            return
        unknown = sorted(set(request.query_params) - allowed)
        if unknown:
            accepted = ", ".join(sorted(allowed)) or "none"
            raise ValidationFailed(
                f"unknown query parameter(s): {', '.join(unknown)} (accepted: {accepted})",
                details={name: ["unknown query parameter"] for name in unknown},
            )

    def audit(self, **fields: Any) -> None:
        """Record what the request acted on; the audit middleware writes it with the outcome."""
        audit_note(self.request, **fields)
