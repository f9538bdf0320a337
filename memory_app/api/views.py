"""Memory API: list and remember facts, and recall the best matches for a query."""

from __future__ import annotations

from typing import Any, ClassVar

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from memory_app import selectors, services
from memory_app.api.serializers import (
    MAX_QUERY_CHARS,
    MemoryCreateIn,
    MemoryEntryOut,
    RecallIn,
    RecallOut,
)
from memory_app.models import SCOPES, MemoryEntry
from openrath_project.api.filters import ProjectScopedFilterSet
from openrath_project.api.views import ScopedAPIView
from openrath_project.errors import PayloadTooLarge, ValidationFailed
from openrath_project.tenancy.models import Project
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import project_get
from sessions_app.chunk_rules import TRUST_LABELS
from sessions_app.models import Session
from sessions_app.selectors import session_get


class MemoryFilter(ProjectScopedFilterSet):
    scope = django_filters.ChoiceFilter(choices=[(s, s) for s in SCOPES])
    agent = django_filters.CharFilter(help_text="Entries of this agent (agent scope).")
    session = django_filters.UUIDFilter(
        field_name="session_id", help_text="Entries of this session (session scope)."
    )
    source_session = django_filters.UUIDFilter(
        field_name="source_session_id", help_text="Entries taken from this session."
    )
    trust = django_filters.ChoiceFilter(choices=[(t, t) for t in TRUST_LABELS])
    q = django_filters.CharFilter(
        field_name="text",
        lookup_expr="icontains",
        max_length=200,
        help_text="Entries whose text contains this (case-insensitive); for ranked search use "
        "recall.",
    )

    class Meta:
        model = MemoryEntry
        fields: ClassVar[list[str]] = []


class MemoryViewSet(ScopedAPIView, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Memory of the caller's tenant and projects."""

    grants: ClassVar[dict[str, str]] = {
        "list": "memory:read",
        "create": "memory:write",
        "recall": "memory:read",
    }
    audit_actions: ClassVar[dict[str, str]] = {
        "create": "memory.create",
        # A POST, so the audit trail records it like every POST; it changes nothing.
        "recall": "memory.recall",
    }
    audit_object_type = "memory"
    serializer_class = MemoryEntryOut
    queryset = MemoryEntry.objects.none()
    filterset_class = MemoryFilter
    cursor_ordering = ("-id",)

    def scope_queryset(self, principal: Principal) -> QuerySet[MemoryEntry]:
        return selectors.memory_list(principal=principal)

    def _session_in(self, project: Project, session_id: object) -> Session | None:
        """The session of a request body: 404 outside the caller's scope, 400 when it belongs
        to another project."""
        if session_id is None:
            return None
        session = session_get(principal=self.principal, session_id=session_id)
        if session.project_id != project.id:
            raise ValidationFailed(
                "session belongs to another project",
                details={"session": ["belongs to another project"]},
            )
        return session

    @extend_schema(summary="List memory entries (newest first)")
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(
        request=MemoryCreateIn,
        responses={
            201: MemoryEntryOut,
            200: OpenApiResponse(
                MemoryEntryOut, description="The fact was already remembered: the stored entry."
            ),
        },
        summary="Remember a fact (a duplicate returns the stored entry with 200)",
    )
    def create(self, request: Request) -> Response:
        data = MemoryCreateIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        project = project_get(principal=self.principal, ref=values["project"])
        self.audit(project=project)
        session = self._session_in(project, values["session"])
        entry, created = services.memory_remember(
            project=project,
            text=values["text"],
            scope=values["scope"],
            agent=values["agent"],
            session=session,
            metadata=values["metadata"],
            trust=values["trust"],
            created_by=self.principal.actor,
        )
        self.audit(object_id=entry.id, details={"created": created})
        return Response(MemoryEntryOut(entry).data, status=201 if created else 200)

    @extend_schema(
        request=RecallIn,
        responses={200: RecallOut},
        summary="Recall the facts that best match a query (BM25), best first",
    )
    @action(detail=False, methods=["post"])
    def recall(self, request: Request) -> Response:
        data = RecallIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        if len(values["query"]) > MAX_QUERY_CHARS:
            raise PayloadTooLarge(
                f"query has {len(values['query'])} characters; the limit is {MAX_QUERY_CHARS}",
                details={"query": [f"at most {MAX_QUERY_CHARS} characters"]},
            )
        project = project_get(principal=self.principal, ref=values["project"])
        self.audit(project=project)
        session = self._session_in(project, values["session"])
        hits = services.memory_recall(
            project=project,
            query=values["query"],
            k=values["k"],
            scope=values["scope"],
            agent=values["agent"],
            session_id=session.id if session is not None else None,
        )
        self.audit(details={"results": len(hits)})
        return Response(RecallOut({"results": hits}).data)
