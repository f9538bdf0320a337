"""``POST /api/v1/runs/{id}/fork/`` and ``GET /api/v1/runs/{id}/forks/``: time travel.

Thin callers of :func:`runs_app.services.forks.run_fork` (what a fork is, and what checkpoint
``0`` means, is there and in ``docs/time-travel.md``) and a list of a run's fork edges.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from openrath_project.api.serializers import StrictInputSerializer
from openrath_project.api.views import ScopedAPIView
from openrath_project.errors import ValidationFailed
from openrath_project.tenancy.principal import Principal
from runs_app import registration, selectors
from runs_app.api.serializers import RunOut
from runs_app.models import Run, RunFork
from runs_app.services.forks import PLAN_MODES, run_fork

FORKS_PAGE_MAX = 200


class RunForkIn(StrictInputSerializer):
    checkpoint = serializers.IntegerField(
        min_value=0,
        help_text="The parent's checkpoint to start from: 0 is the run's start, 1.. the "
        "checkpoints its steps committed (400 beyond the last).",
    )
    state_patch = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="An RFC 7386 JSON merge patch applied to the checkpoint's state (null "
        "removes a key); the result is validated like any state.",
    )
    plan = serializers.ChoiceField(
        choices=[(m, m) for m in PLAN_MODES],
        required=False,
        default="pinned",
        help_text="pinned: the parent's plan; current: what the workflow compiles to now (409 "
        "plan_mismatch when it lacks the checkpoint's next nodes).",
    )
    title = serializers.CharField(max_length=300, required=False, default="", allow_blank=True)
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)

    def validate_state_patch(self, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise serializers.ValidationError("must be a JSON object (an RFC 7386 merge patch)")
        return value


class RunForkOut(serializers.Serializer):
    child = serializers.UUIDField(source="child_id", help_text="The forked run.")
    checkpoint = serializers.IntegerField(source="checkpoint_seq")
    plan_mode = serializers.CharField()
    state_patch = serializers.JSONField(allow_null=True)
    by = serializers.CharField(source="created_by")
    reason = serializers.CharField()
    at = serializers.DateTimeField(source="created_at")
    id = serializers.IntegerField()


class RunForkPageOut(serializers.Serializer):
    results = RunForkOut(many=True)
    next = serializers.CharField(allow_null=True)


class ForkQuery(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, default=0, help_text="A fork edge's id.")
    limit = serializers.IntegerField(min_value=1, max_value=FORKS_PAGE_MAX, default=100)


class RunForkView(ScopedAPIView):
    """Fork a run from one of its checkpoints: a new queued run (201)."""

    grants: ClassVar[dict[str, str]] = {"POST": "runs:write"}
    audit_actions: ClassVar[dict[str, str]] = {"POST": "run.fork"}
    audit_object_type = "run"
    extra_error_statuses = (409,)
    queryset = Run.objects.none()

    def scope_queryset(self, principal: Principal) -> QuerySet[Run]:
        return selectors.run_list(principal=principal)

    @extend_schema(
        request=RunForkIn,
        responses={201: RunOut},
        summary="Fork the run from a checkpoint (a new run; the parent is unchanged)",
        operation_id="runs_fork_create",
    )
    def post(self, request: Request, pk: str) -> Response:
        parent = selectors.run_get(principal=self.principal, run_id=pk, related=("plan",))
        self.audit(object_id=parent.id, project=parent.project)
        data = RunForkIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        child = run_fork(
            run=parent,
            checkpoint_seq=values["checkpoint"],
            state_patch=values.get("state_patch"),
            plan=values["plan"],
            title=values["title"],
            reason=values["reason"],
            actor=self.principal.actor,
            registry=registration.workflows() if values["plan"] == "current" else None,
        )
        self.audit(
            object_id=child.id,
            details={
                "parent": str(parent.id),
                "checkpoint": values["checkpoint"],
                "plan": values["plan"],
                "patched": values.get("state_patch") is not None,
            },
        )
        return Response(RunOut(child).data, status=201)


class RunForkListView(ScopedAPIView):
    """The runs forked from a run (its fork edges, oldest first)."""

    grants: ClassVar[dict[str, str]] = {"GET": "runs:read"}
    queryset = RunFork.objects.none()

    def scope_queryset(self, principal: Principal) -> QuerySet[RunFork]:
        return RunFork.objects.for_principal(principal)

    @extend_schema(
        parameters=[ForkQuery],
        responses={200: RunForkPageOut},
        summary="The runs forked from this run, with their branch points",
        operation_id="runs_forks_list",
    )
    def get(self, request: Request, pk: str) -> Response:
        parent = selectors.run_get(principal=self.principal, run_id=pk)
        query = ForkQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        unknown = sorted(set(request.query_params) - {"after", "limit"})
        if unknown:
            raise ValidationFailed(
                f"unknown query parameter(s): {', '.join(unknown)} (accepted: after, limit)",
                details={name: ["unknown query parameter"] for name in unknown},
            )
        after, limit = query.validated_data["after"], query.validated_data["limit"]
        edges = list(
            self.scope_queryset(self.principal)
            .filter(parent=parent, id__gt=after)
            .order_by("id")[:limit]
        )
        next_url = None
        if len(edges) == limit:
            next_url = request.build_absolute_uri(
                f"{request.path}?after={edges[-1].id}&limit={limit}"
            )
        return Response({"results": RunForkOut(edges, many=True).data, "next": next_url})
