"""Schedules API: CRUD, pause / resume, the next fire times and the fire log."""

from __future__ import annotations

from typing import Any, ClassVar

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from openrath_project.api.filters import CreatedRangeFilterSet
from openrath_project.api.views import ScopedAPIView
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import project_get
from schedules_app import selectors, services
from schedules_app.api.serializers import (
    FireOut,
    FireQuery,
    NextOut,
    NextQuery,
    ScheduleCreateIn,
    ScheduleOut,
    ScheduleUpdateIn,
)
from schedules_app.models import Schedule
from schedules_app.timing import KINDS


class ScheduleFilter(CreatedRangeFilterSet):
    workflow = django_filters.CharFilter()
    kind = django_filters.ChoiceFilter(choices=[(k, k) for k in KINDS])
    paused = django_filters.BooleanFilter()

    class Meta:
        model = Schedule
        fields: ClassVar[list[str]] = []


#: The create body's names -> schedule_create's keywords (the rest are the same).
_CREATE_NAMES = {"timezone": "timezone_name"}


@extend_schema_view(list=extend_schema(summary="List schedules (newest first)"))
class ScheduleViewSet(ScopedAPIView, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Schedules of the caller's tenant and projects. Changing one needs ``runs:write`` (it
    starts runs); reading needs ``runs:read``."""

    grants: ClassVar[dict[str, str]] = {
        "list": "runs:read",
        "retrieve": "runs:read",
        "upcoming": "runs:read",
        "fires": "runs:read",
        "create": "runs:write",
        "partial_update": "runs:write",
        "destroy": "runs:write",
        "pause": "runs:write",
        "resume": "runs:write",
    }
    audit_actions: ClassVar[dict[str, str]] = {
        "create": "schedule.create",
        "partial_update": "schedule.update",
        "destroy": "schedule.delete",
        "pause": "schedule.pause",
        "resume": "schedule.resume",
    }
    audit_object_type = "schedule"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]  # no PUT
    serializer_class = ScheduleOut
    queryset = Schedule.objects.none()
    filterset_class = ScheduleFilter
    cursor_ordering = ("-id",)
    action_query_params: ClassVar[dict[str, tuple[str, ...]]] = {
        "upcoming": ("count",),
        "fires": ("limit",),
    }

    def scope_queryset(self, principal: Principal) -> QuerySet[Schedule]:
        return selectors.schedule_list(principal=principal)

    def _schedule(self, pk: str) -> Schedule:
        schedule = selectors.schedule_get(principal=self.principal, schedule_id=pk)
        self.audit(object_id=schedule.id, project=schedule.project)
        return schedule

    @extend_schema(summary="Get a schedule")
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(ScheduleOut(self._schedule(pk)).data)

    @extend_schema(
        request=ScheduleCreateIn,
        responses={201: ScheduleOut},
        summary="Create a schedule (cron or interval) that starts runs of a workflow",
    )
    def create(self, request: Request) -> Response:
        data = ScheduleCreateIn(data=request.data)
        data.is_valid(raise_exception=True)
        values: dict[str, Any] = dict(data.validated_data)
        project = project_get(principal=self.principal, ref=values.pop("project"))
        self.audit(project=project)
        schedule = services.schedule_create(
            project=project,
            created_by=self.principal.actor,
            **{_CREATE_NAMES.get(name, name): value for name, value in values.items()},
        )
        self.audit(
            object_id=schedule.id,
            details={"workflow": schedule.workflow, "kind": schedule.kind},
        )
        return Response(ScheduleOut(schedule).data, status=201)

    @extend_schema(
        request=ScheduleUpdateIn,
        responses={200: ScheduleOut},
        summary="Change a schedule (its next tick is recomputed from now)",
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        schedule = self._schedule(pk)
        data = ScheduleUpdateIn(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        changes = dict(data.validated_data)
        changed = services.schedule_update(schedule=schedule, changes=changes)
        self.audit(details={"fields": sorted(changes)})
        return Response(ScheduleOut(changed).data)

    @extend_schema(
        request=None,
        responses={204: OpenApiResponse(description="Deleted (the runs it started stay).")},
        summary="Delete a schedule and its fire log",
    )
    def destroy(self, request: Request, pk: str) -> Response:
        schedule = self._schedule(pk)
        services.schedule_delete(schedule=schedule)
        return Response(status=204)

    @extend_schema(request=None, responses={200: ScheduleOut}, summary="Pause a schedule")
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str) -> Response:
        schedule, changed = services.schedule_pause(schedule=self._schedule(pk))
        self.audit(details={"changed": changed})
        return Response(ScheduleOut(schedule).data)

    @extend_schema(
        request=None,
        responses={200: ScheduleOut},
        summary="Resume a paused schedule (from its first tick after now)",
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        schedule, changed = services.schedule_resume(schedule=self._schedule(pk))
        self.audit(details={"changed": changed})
        return Response(ScheduleOut(schedule).data)

    @extend_schema(
        parameters=[NextQuery],
        responses={200: NextOut},
        summary="The schedule's next fire times",
    )
    @action(detail=True, methods=["get"], url_path="next")
    def upcoming(self, request: Request, pk: str) -> Response:
        schedule = self._schedule(pk)
        query = NextQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        times = selectors.schedule_upcoming(schedule, count=query.validated_data["count"])
        body = {"paused": schedule.paused, "timezone": schedule.timezone, "times": times}
        return Response(NextOut(body).data)

    @extend_schema(
        parameters=[FireQuery],
        responses={200: FireOut(many=True)},
        summary="The schedule's latest ticks and what each did",
    )
    @action(detail=True, methods=["get"])
    def fires(self, request: Request, pk: str) -> Response:
        schedule = self._schedule(pk)
        query = FireQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = list(selectors.fire_list(schedule=schedule)[: query.validated_data["limit"]])
        return Response({"results": FireOut(rows, many=True).data, "next": None})
