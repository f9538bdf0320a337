"""Effects review API: list the ledger, resolve what needs review."""

from __future__ import annotations

from typing import ClassVar

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from effects_app import selectors, services
from effects_app.api.serializers import STATE_CHOICES, EffectOut, EffectResolveIn
from effects_app.models import EffectRecord
from openrath_project.api.filters import ProjectScopedFilterSet
from openrath_project.api.views import ScopedAPIView
from openrath_project.tenancy.principal import Principal


class EffectFilter(ProjectScopedFilterSet):
    status = django_filters.ChoiceFilter(choices=STATE_CHOICES, help_text="The effect's status.")
    state = django_filters.ChoiceFilter(
        field_name="status", choices=STATE_CHOICES, help_text="Deprecated alias of status."
    )
    run = django_filters.UUIDFilter(field_name="run_id")

    class Meta:
        model = EffectRecord
        fields: ClassVar[list[str]] = []


@extend_schema_view(list=extend_schema(summary="List the effect ledger (newest first)"))
class EffectViewSet(ScopedAPIView, mixins.ListModelMixin, viewsets.GenericViewSet):
    """The effect ledger of the caller's tenant and projects."""

    grants: ClassVar[dict[str, str]] = {
        "list": "effects:read",
        "retrieve": "effects:read",
        "resolve": "effects:resolve",
    }
    audit_actions: ClassVar[dict[str, str]] = {"resolve": "effect.resolve"}
    audit_object_type = "effect"
    extra_error_statuses = (409,)
    serializer_class = EffectOut
    queryset = EffectRecord.objects.none()
    filterset_class = EffectFilter
    cursor_ordering = ("-id",)

    def scope_queryset(self, principal: Principal) -> QuerySet[EffectRecord]:
        # The matched ancestor record in the same query: no query per listed effect.
        return selectors.effect_list(principal=principal).select_related("ancestor")

    def _effect(self, pk: str) -> EffectRecord:
        effect = selectors.effect_get(principal=self.principal, effect_id=pk)
        self.audit(object_id=effect.id, project=effect.project)
        return effect

    @extend_schema(summary="Get an effect")
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(EffectOut(self._effect(pk)).data)

    @extend_schema(
        request=EffectResolveIn,
        responses={200: EffectOut},
        summary="Resolve an effect that needs review",
    )
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, pk: str) -> Response:
        effect = self._effect(pk)
        data = EffectResolveIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        resolved = services.effect_resolve(
            effect=effect,
            outcome=values["outcome"],
            request_digest=values["request_digest"],
            result=values.get("result"),
            reason=values["reason"],
            actor=self.principal.actor,
            ancestor_digest=values.get("ancestor_digest"),
        )
        self.audit(
            details={
                "outcome": values["outcome"],
                "request_digest": values["request_digest"],
                "run": str(effect.run_id),
            }
        )
        return Response(EffectOut(resolved).data)
