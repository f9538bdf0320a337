"""Retention API: policy CRUD, a dry run (of a stored policy or of a draft), applying a policy
now, and the pass log. Policies are project configuration: reading needs ``projects:read``,
changing or applying one ``projects:write``."""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from openrath_project.api.views import ScopedAPIView
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import project_get
from retention_app import selectors, services
from retention_app.api.serializers import (
    PassOut,
    PassQuery,
    PolicyCreateIn,
    PolicyOut,
    PolicyUpdateIn,
    ReportOut,
)
from retention_app.models import RetentionPolicy

#: Seconds one ``apply`` request may spend deleting (the rest is left to the reconciler).
API_APPLY_SECONDS = 10.0


@extend_schema_view(list=extend_schema(summary="List retention policies (newest first)"))
class RetentionPolicyViewSet(ScopedAPIView, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Retention policies of the caller's tenant and projects (one per project)."""

    grants: ClassVar[dict[str, str]] = {
        "list": "projects:read",
        "retrieve": "projects:read",
        "preview": "projects:read",
        "preview_draft": "projects:read",
        "passes": "projects:read",
        "create": "projects:write",
        "partial_update": "projects:write",
        "destroy": "projects:write",
        "apply": "projects:write",
    }
    audit_actions: ClassVar[dict[str, str]] = {
        "create": "retention.create",
        "partial_update": "retention.update",
        "destroy": "retention.delete",
        "apply": "retention.apply",
    }
    audit_object_type = "retention_policy"
    extra_error_statuses = (409,)
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]  # no PUT
    serializer_class = PolicyOut
    queryset = RetentionPolicy.objects.none()
    cursor_ordering = ("-id",)
    action_query_params: ClassVar[dict[str, tuple[str, ...]]] = {"passes": ("limit",)}

    def scope_queryset(self, principal: Principal) -> QuerySet[RetentionPolicy]:
        return selectors.policy_list(principal=principal)

    def _policy(self, pk: str) -> RetentionPolicy:
        policy = selectors.policy_get(principal=self.principal, policy_id=pk)
        self.audit(object_id=policy.id, project=policy.project)
        return policy

    @extend_schema(summary="Get a retention policy")
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(PolicyOut(self._policy(pk)).data)

    @extend_schema(
        request=PolicyCreateIn,
        responses={201: PolicyOut},
        summary="Give a project a retention policy (one per project; a second one is a 409)",
    )
    def create(self, request: Request) -> Response:
        data = PolicyCreateIn(data=request.data)
        data.is_valid(raise_exception=True)
        values: dict[str, Any] = dict(data.validated_data)
        project = project_get(principal=self.principal, ref=values.pop("project"))
        self.audit(project=project)
        policy = services.policy_create(project=project, created_by=self.principal.actor, **values)
        self.audit(object_id=policy.id, details={"fields": sorted(values)})
        return Response(PolicyOut(policy).data, status=201)

    @extend_schema(
        request=PolicyUpdateIn,
        responses={200: PolicyOut},
        summary="Change a retention policy (applied at the next reconciler tick)",
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        policy = self._policy(pk)
        data = PolicyUpdateIn(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        changes = dict(data.validated_data)
        changed = services.policy_update(policy=policy, changes=changes)
        self.audit(details={"fields": sorted(changes)})
        return Response(PolicyOut(changed).data)

    @extend_schema(
        request=None,
        responses={204: OpenApiResponse(description="Deleted (what it removed stays removed).")},
        summary="Delete a retention policy and its pass log",
    )
    def destroy(self, request: Request, pk: str) -> Response:
        services.policy_delete(policy=self._policy(pk))
        return Response(status=204)

    @extend_schema(
        request=None,
        responses={200: ReportOut},
        summary="Dry run: what a pass of the policy would remove now (changes nothing)",
    )
    @action(detail=True, methods=["get"])
    def preview(self, request: Request, pk: str) -> Response:
        report = services.retention_dry_run(policy=self._policy(pk))
        return Response(ReportOut(report.as_dict()).data)

    @extend_schema(
        request=PolicyCreateIn,
        responses={200: ReportOut},
        summary="Dry run of a draft policy (not stored): what it would remove now",
    )
    @action(detail=False, methods=["post"], url_path="preview")
    def preview_draft(self, request: Request) -> Response:
        data = PolicyCreateIn(data=request.data)
        data.is_valid(raise_exception=True)
        values: dict[str, Any] = dict(data.validated_data)
        project = project_get(principal=self.principal, ref=values.pop("project"))
        self.audit(project=project)
        draft = services.policy_draft(project=project, values=values)
        report = services.retention_dry_run(policy=draft)
        return Response(ReportOut(report.as_dict()).data)

    @extend_schema(
        request=None,
        responses={200: ReportOut},
        summary="Apply the policy now (bounded: what is left goes at the next ticks)",
    )
    @action(detail=True, methods=["post"])
    def apply(self, request: Request, pk: str) -> Response:
        policy = self._policy(pk)
        seconds = float(getattr(settings, "RETENTION_API_SECONDS", API_APPLY_SECONDS))
        report = services.retention_apply(
            policy=policy,
            trigger="api",
            actor=self.principal.actor,
            now=timezone.now(),
            budget_seconds=seconds,
        )
        body = report.as_dict()
        self.audit(details={"removed": {k: v["count"] for k, v in report.removed.items()}})
        return Response(ReportOut(body).data)

    @extend_schema(
        parameters=[PassQuery],
        responses={200: PassOut(many=True)},
        summary="The policy's latest passes and what each removed",
    )
    @action(detail=True, methods=["get"])
    def passes(self, request: Request, pk: str) -> Response:
        policy = self._policy(pk)
        query = PassQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = list(selectors.pass_list(policy=policy)[: query.validated_data["limit"]])
        return Response({"results": PassOut(rows, many=True).data, "next": None})
