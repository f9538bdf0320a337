"""Projects and audit endpoints."""

from __future__ import annotations

from typing import ClassVar

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from openrath_project.api.filters import UtcIsoDateTimeFilter
from openrath_project.api.views import ScopedAPIView
from openrath_project.errors import PermissionDenied
from openrath_project.tenancy import selectors, services
from openrath_project.tenancy.api.serializers import (
    AuditEventOut,
    ProjectDetailOut,
    ProjectIn,
    ProjectOut,
)
from openrath_project.tenancy.models import AuditEvent, Project
from openrath_project.tenancy.principal import Principal
from sessions_app.selectors import project_usage


class ProjectViewSet(
    ScopedAPIView,
    mixins.ListModelMixin,
    viewsets.GenericViewSet,
):
    """Projects of the caller's tenant (limited to the token's projects when it is restricted)."""

    grants: ClassVar[dict[str, str]] = {
        "list": "projects:read",
        "retrieve": "projects:read",
        "create": "projects:write",
    }
    audit_actions: ClassVar[dict[str, str]] = {"create": "project.create"}
    audit_object_type = "project"
    extra_error_statuses = (409,)
    serializer_class = ProjectOut
    queryset = Project.objects.none()
    cursor_ordering = ("slug",)
    lookup_value_regex = "[^/]+"

    def scope_queryset(self, principal: Principal) -> QuerySet[Project]:
        return selectors.project_list(principal=principal)

    @extend_schema(
        summary="Get a project by id or slug, with its usage", responses={200: ProjectDetailOut}
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        project = selectors.project_get(principal=self.principal, ref=pk)
        project.usage = project_usage(project)  # type: ignore[attr-defined]
        return Response(ProjectDetailOut(project).data)

    @extend_schema(request=ProjectIn, responses={201: ProjectOut}, summary="Create a project")
    def create(self, request: Request) -> Response:
        principal = self.principal
        if principal.is_project_restricted:
            raise PermissionDenied("a token limited to some projects cannot create projects")
        data = ProjectIn(data=request.data)
        data.is_valid(raise_exception=True)
        project = services.project_create(
            tenant=principal.tenant,
            slug=data.validated_data["slug"],
            name=data.validated_data.get("name"),
        )
        self.audit(object_id=project.id, project=project)
        return Response(ProjectOut(project).data, status=201)


class AuditFilter(django_filters.FilterSet):
    action = django_filters.CharFilter()
    outcome = django_filters.ChoiceFilter(choices=[(o, o) for o in AuditEvent.OUTCOMES])
    actor = django_filters.CharFilter()
    object_type = django_filters.CharFilter()
    object_id = django_filters.CharFilter()
    request_id = django_filters.CharFilter()
    project = django_filters.UUIDFilter(field_name="project_id")
    created_after = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields: ClassVar[list[str]] = []


class AuditViewSet(ScopedAPIView, mixins.ListModelMixin, viewsets.GenericViewSet):
    """The tenant's audit trail, newest first."""

    grants: ClassVar[dict[str, str]] = {"list": "audit:read"}
    serializer_class = AuditEventOut
    queryset = AuditEvent.objects.none()
    filterset_class = AuditFilter
    cursor_ordering = ("-id",)

    def scope_queryset(self, principal: Principal) -> QuerySet[AuditEvent]:
        return selectors.audit_list(principal=principal)
