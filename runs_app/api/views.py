"""Runs and workflows API."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, ClassVar

import django_filters
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from openrath_project.api.filters import CreatedRangeFilterSet, ProjectScopedFilterSet
from openrath_project.api.views import ScopedAPIView
from openrath_project.artifacts import artifact_get
from openrath_project.errors import NotFound, ValidationFailed
from openrath_project.jsontext import digest
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import project_get
from runs_app import registration, selectors, services
from runs_app.api.serializers import (
    INTERRUPT_KIND_CHOICES,
    INTERRUPT_STATUS_CHOICES,
    STATUS_CHOICES,
    CancelIn,
    CheckpointOut,
    EventQuery,
    InterruptOut,
    InterruptResolveIn,
    ResumeIn,
    RunCreateIn,
    RunEventOut,
    RunOut,
    WorkflowDetailOut,
    WorkflowListOut,
)
from runs_app.interrupts import interrupt_resolve
from runs_app.models import Interrupt, Run, WorkflowPlan
from runs_app.registry import RegisteredWorkflow, UnknownWorkflow
from runs_app.services.superseded import audit_superseded
from sessions_app.selectors import session_get

IDEMPOTENCY_HEADER = "HTTP_IDEMPOTENCY_KEY"


class RunFilter(CreatedRangeFilterSet):
    status = django_filters.ChoiceFilter(choices=STATUS_CHOICES)
    workflow = django_filters.CharFilter()
    parent = django_filters.UUIDFilter(field_name="parent_id")
    #: Replays (regression checks, ``runs_app.replay``) are listed only when asked for.
    kind = django_filters.ChoiceFilter(
        choices=[("run", "run"), ("replay", "replay")],
        help_text="run (the default: replays are left out) or replay",
    )

    class Meta:
        model = Run
        fields: ClassVar[list[str]] = []

    @property
    def qs(self) -> QuerySet[Run]:
        runs = super().qs
        if not self.form.cleaned_data.get("kind"):
            runs = runs.filter(kind="run")
        return runs


def _page(request: Request, items: list[Any], key: str, limit: int, out: Any) -> Response:
    next_url = None
    if len(items) == limit:
        next_url = request.build_absolute_uri(f"{request.path}?after={key}&limit={limit}")
    return Response({"results": out, "next": next_url})


@extend_schema_view(list=extend_schema(summary="List runs (newest first)"))
class RunViewSet(ScopedAPIView, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Runs of the caller's tenant and projects."""

    grants: ClassVar[dict[str, str]] = {
        "list": "runs:read",
        "retrieve": "runs:read",
        "events": "runs:read",
        "checkpoints": "runs:read",
        "artifact": "runs:read",
        "create": "runs:write",
        "resume": "runs:write",
        "cancel": "runs:cancel",
    }
    audit_actions: ClassVar[dict[str, str]] = {
        "create": "run.create",
        "cancel": "run.cancel",
        "resume": "run.resume",
    }
    audit_object_type = "run"
    extra_error_statuses = (409,)
    serializer_class = RunOut
    queryset = Run.objects.none()
    filterset_class = RunFilter
    cursor_ordering = ("-id",)
    action_query_params: ClassVar[dict[str, tuple[str, ...]]] = {
        "events": ("after", "limit"),
        "checkpoints": ("after", "limit"),
    }

    def scope_queryset(self, principal: Principal) -> QuerySet[Run]:
        # ``forked_from`` (a reverse one-to-one) in the same query: no query per listed run.
        return selectors.run_list(principal=principal).select_related("forked_from")

    def _run(self, pk: str) -> Run:
        run = selectors.run_for_view(principal=self.principal, run_id=pk)
        self.audit(object_id=run.id, project=run.project)
        return run

    @extend_schema(summary="Get a run (with its latest state)")
    def retrieve(self, request: Request, pk: str) -> Response:
        run = self._run(pk)
        run.state = services.run_state_at(run)
        return Response(RunOut(run).data)

    @extend_schema(
        request=RunCreateIn,
        responses={201: RunOut, 200: RunOut},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Same key and body: the same run (200). Same key, other body: 409.",
            )
        ],
        summary="Start a run of a registered workflow",
    )
    def create(self, request: Request) -> Response:
        data = RunCreateIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        key = request.META.get(IDEMPOTENCY_HEADER)
        if key is not None and not (0 < len(key) <= 200 and key.isprintable()):
            raise ValidationFailed(
                "Idempotency-Key must be 1-200 printable characters",
                details={"Idempotency-Key": ["invalid"]},
            )
        project = project_get(principal=self.principal, ref=values["project"])
        self.audit(project=project)
        registered: RegisteredWorkflow = registration.workflows().get(values["workflow"])
        session = None
        if "session" in values:
            session = session_get(
                principal=self.principal, session_id=values["session"], lineage=False
            )
        run, created = services.run_create(
            project=project,
            workflow=registered,
            state=values["state"],
            session=session,
            user_message=values.get("user_message"),
            priority=values["priority"],
            deadline=values.get("deadline"),
            idempotency_key=key,
            digest_of_request=digest(request.data),
            created_by=self.principal.actor,
            token_budget=values.get("token_budget"),
            cost_budget_usd=(
                Decimal(str(values["cost_budget_usd"])) if "cost_budget_usd" in values else None
            ),
            input_policy=values.get("input_policy"),
        )
        details: dict[str, Any] = {"workflow": registered.name, "idempotent_replay": not created}
        if run.input_policy:
            details["input_policy"] = run.input_policy
            if run.after_run_id is not None:
                details["after_run"] = str(run.after_run_id)
        self.audit(object_id=run.id, details=details)
        if created:
            audit_superseded(
                run=run,
                project=project,
                actor=self.principal.actor,
                request_id=getattr(self.request._request, "request_id", ""),
                status_code=201,
            )
        if created:
            # A run inserted by this request has no fork edge (only a fork writes one, with
            # its run): RunOut's forked_from needs no query.
            Run._meta.get_field("forked_from").set_cached_value(run, None)
        response = Response(RunOut(run).data, status=201 if created else 200)
        if not created:
            response["Idempotent-Replayed"] = "true"
        return response

    @extend_schema(
        parameters=[EventQuery],
        responses={200: RunEventOut(many=True)},
        summary="The run's events (contiguous seq), after a seq",
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str) -> Response:
        run = self._run(pk)
        query = EventQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        limit = query.validated_data["limit"]
        items = selectors.event_page(run, after=query.validated_data["after"], limit=limit)
        return _page(
            request,
            items,
            str(items[-1].seq) if items else "0",
            limit,
            RunEventOut(items, many=True).data,
        )

    @extend_schema(
        parameters=[EventQuery],
        responses={200: CheckpointOut(many=True)},
        summary="The run's checkpoints with their state and session reference",
    )
    @action(detail=True, methods=["get"])
    def checkpoints(self, request: Request, pk: str) -> Response:
        run = self._run(pk)
        query = EventQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        limit = min(query.validated_data["limit"], 200)
        items = selectors.checkpoint_page(run, after=query.validated_data["after"], limit=limit)
        last = str(items[-1]["checkpoint"].seq) if items else "0"
        return _page(request, items, last, limit, CheckpointOut(items, many=True).data)

    @extend_schema(
        responses={(200, "application/json"): OpenApiResponse(OpenApiTypes.ANY)},
        summary="A large state value the run keeps as an artifact (by its digest)",
        description=(
            "State values over OPENRATH_STATE_INLINE_BYTES appear in the run's state, output "
            'and checkpoints as {"$artifact": {"digest", "size", "media_type"}}; this returns '
            "the value behind such a reference, verified against its digest. 404 unless the "
            "run refers to that digest."
        ),
    )
    @action(detail=True, methods=["get"], url_path=r"artifacts/(?P<digest>[0-9a-f]{64})")
    def artifact(self, request: Request, pk: str, digest: str) -> HttpResponse:
        run = self._run(pk)
        if not selectors.run_refers_to(run, digest):
            raise NotFound("the run refers to no such artifact", details={"digest": digest})
        data = artifact_get(tenant_id=run.tenant_id, digest=digest)
        return HttpResponse(data, content_type="application/json")

    @extend_schema(
        request=CancelIn, responses={200: RunOut}, summary="Cancel the run (and its branches)"
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        run = self._run(pk)
        data = CancelIn(data=request.data)
        data.is_valid(raise_exception=True)
        cancelled = services.run_cancel(
            run=run, reason=data.validated_data["reason"], actor=self.principal.actor
        )
        return Response(RunOut(cancelled).data)

    @extend_schema(
        request=ResumeIn, responses={200: RunOut}, summary="Resume a run that needs review"
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        run = self._run(pk)
        data = ResumeIn(data=request.data)
        data.is_valid(raise_exception=True)
        registered = None
        if data.validated_data.get("accept_plan"):
            try:
                registered = registration.workflows().get(run.workflow)
            except UnknownWorkflow:
                registered = None
        resumed = services.run_resume(
            run=run,
            reason=data.validated_data["reason"],
            actor=self.principal.actor,
            accept_plan=data.validated_data.get("accept_plan"),
            registered=registered,
        )
        self.audit(details={"reason": data.validated_data["reason"]})
        return Response(RunOut(resumed).data)


def _workflow_out(entry: RegisteredWorkflow) -> dict[str, Any]:
    plan = entry.plan
    return {
        "name": entry.name,
        "description": plan.description or "",
        "version": plan.version,
        "plan": plan.hash,
        "entry": plan.entry,
        "nodes": len(plan.nodes),
    }


class WorkflowViewSet(ScopedAPIView, viewsets.ViewSet):
    """Registered workflows and their plan graphs (the same for every tenant)."""

    grants: ClassVar[dict[str, str]] = {"list": "runs:read", "retrieve": "runs:read"}
    queryset = WorkflowPlan.objects.none()  # for the schema generator only
    lookup_field = "name"
    pagination_class = None  # a short list from the code; the body is {results, next: null}

    def scope_queryset(self, principal: Principal) -> QuerySet[WorkflowPlan]:
        return WorkflowPlan.objects.none()  # workflows come from the code, not the database

    lookup_value_regex = "[^/]+"

    @extend_schema(responses={200: WorkflowListOut}, summary="Registered workflows")
    def list(self, request: Request) -> Response:
        entries = sorted(registration.workflows().all(), key=lambda e: e.name)
        return Response({"results": [_workflow_out(e) for e in entries], "next": None})

    @extend_schema(responses={200: WorkflowDetailOut}, summary="A workflow's plan graph")
    def retrieve(self, request: Request, name: str) -> Response:
        try:
            entry = registration.workflows().get(name)
        except UnknownWorkflow as exc:
            raise NotFound(f"no workflow named {name!r}") from exc
        return Response({**_workflow_out(entry), "graph": entry.plan.graph()})


class InterruptFilter(ProjectScopedFilterSet):
    status = django_filters.ChoiceFilter(
        choices=INTERRUPT_STATUS_CHOICES, help_text="The interrupt's status."
    )
    state = django_filters.ChoiceFilter(
        field_name="status",
        choices=INTERRUPT_STATUS_CHOICES,
        help_text="Deprecated alias of status.",
    )
    kind = django_filters.ChoiceFilter(choices=INTERRUPT_KIND_CHOICES)
    run = django_filters.UUIDFilter(field_name="run_id")

    class Meta:
        model = Interrupt
        fields: ClassVar[list[str]] = []


@extend_schema_view(
    list=extend_schema(summary="List interrupts (newest first); filter with ?status=")
)
class InterruptViewSet(ScopedAPIView, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Interrupts (approvals, inputs, reviews) of the caller's tenant and projects."""

    grants: ClassVar[dict[str, str]] = {
        "list": "interrupts:read",
        "retrieve": "interrupts:read",
        "resolve": "interrupts:resolve",
    }
    audit_actions: ClassVar[dict[str, str]] = {"resolve": "interrupt.resolve"}
    audit_object_type = "interrupt"
    extra_error_statuses = (409,)
    serializer_class = InterruptOut
    queryset = Interrupt.objects.none()
    filterset_class = InterruptFilter
    cursor_ordering = ("-id",)

    def scope_queryset(self, principal: Principal) -> QuerySet[Interrupt]:
        return selectors.interrupt_list(principal=principal)

    def _interrupt(self, pk: str) -> Interrupt:
        found = selectors.interrupt_get(principal=self.principal, interrupt_id=pk)
        self.audit(object_id=found.id, project=found.project)
        return found

    @extend_schema(summary="Get an interrupt")
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(InterruptOut(self._interrupt(pk)).data)

    @extend_schema(
        request=InterruptResolveIn,
        responses={200: InterruptOut},
        summary="Approve, reject or respond (once); requeues the run",
    )
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, pk: str) -> Response:
        # One transaction from the lookup, which locks the run (the interrupt, its project and
        # its run in one statement), to the decision's commit.
        with transaction.atomic():
            found = selectors.interrupt_get(
                principal=self.principal, interrupt_id=pk, lock_run=True
            )
            self.audit(object_id=found.id, project=found.project)
            data = InterruptResolveIn(data=request.data)
            data.is_valid(raise_exception=True)
            values = data.validated_data
            resolved = interrupt_resolve(
                interrupt=found,
                decision=values["decision"],
                response=values.get("response"),
                reason=values["reason"],
                request_digest=values["request_digest"],
                actor=self.principal.actor,
                locked_run=found.run,
            )
        self.audit(
            details={
                "decision": values["decision"],
                "request_digest": resolved.request_digest,
                "run": str(resolved.run_id),
            }
        )
        return Response(InterruptOut(resolved).data)
