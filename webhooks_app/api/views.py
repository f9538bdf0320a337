"""Webhooks API: subscriptions (CRUD, enable, disable), their delivery log and redelivery."""

from __future__ import annotations

from typing import ClassVar

import django_filters
from django.db.models import QuerySet
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

from openrath_project.api.filters import CreatedRangeFilterSet
from openrath_project.api.views import ScopedAPIView
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import project_get
from webhooks_app import selectors, services
from webhooks_app.api.serializers import (
    DeliveryDetailOut,
    DeliveryOut,
    DeliveryQuery,
    WebhookCreatedOut,
    WebhookCreateIn,
    WebhookDisableIn,
    WebhookOut,
    WebhookUpdateIn,
)
from webhooks_app.models import WebhookDelivery, WebhookSubscription

DELIVERY_ID = OpenApiParameter(
    "delivery_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The delivery's id."
)


class WebhookFilter(CreatedRangeFilterSet):
    enabled = django_filters.BooleanFilter()

    class Meta:
        model = WebhookSubscription
        fields: ClassVar[list[str]] = []


@extend_schema_view(list=extend_schema(summary="List webhook subscriptions (newest first)"))
class WebhookViewSet(ScopedAPIView, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Webhook subscriptions of the caller's tenant and projects. They are project
    configuration: reading needs ``projects:read``; changing one, and redelivering,
    ``projects:write``."""

    grants: ClassVar[dict[str, str]] = {
        "list": "projects:read",
        "retrieve": "projects:read",
        "deliveries": "projects:read",
        "delivery": "projects:read",
        "create": "projects:write",
        "partial_update": "projects:write",
        "destroy": "projects:write",
        "enable": "projects:write",
        "disable": "projects:write",
        "redeliver": "projects:write",
    }
    audit_actions: ClassVar[dict[str, str]] = {
        "create": "webhook.create",
        "partial_update": "webhook.update",
        "destroy": "webhook.delete",
        "enable": "webhook.enable",
        "disable": "webhook.disable",
        "redeliver": "webhook.redeliver",
    }
    audit_object_type = "webhook"
    extra_error_statuses = (409,)
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]  # no PUT
    serializer_class = WebhookOut
    queryset = WebhookSubscription.objects.none()
    filterset_class = WebhookFilter
    cursor_ordering = ("-id",)
    action_query_params: ClassVar[dict[str, tuple[str, ...]]] = {
        "deliveries": ("status", "limit"),
    }

    def scope_queryset(self, principal: Principal) -> QuerySet[WebhookSubscription]:
        return selectors.webhook_list(principal=principal)

    def _webhook(self, pk: str) -> WebhookSubscription:
        subscription = selectors.webhook_get(principal=self.principal, webhook_id=pk)
        self.audit(object_id=subscription.id, project=subscription.project)
        return subscription

    @extend_schema(summary="Get a webhook subscription")
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(WebhookOut(self._webhook(pk)).data)

    @extend_schema(
        request=WebhookCreateIn,
        responses={201: WebhookCreatedOut},
        summary="Subscribe a URL to events of a project (the signing secret is shown once)",
    )
    def create(self, request: Request) -> Response:
        data = WebhookCreateIn(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        project = project_get(principal=self.principal, ref=values.pop("project"))
        self.audit(project=project)
        subscription, secret = services.webhook_create(
            project=project,
            url=values["url"],
            event_types=values["event_types"],
            description=values.get("description", ""),
            created_by=self.principal.actor,
        )
        self.audit(
            object_id=subscription.id,
            details={"url": subscription.url, "event_types": subscription.event_types},
        )
        subscription.secret = secret  # type: ignore[attr-defined]  # shown once, never stored
        return Response(WebhookCreatedOut(subscription).data, status=201)

    @extend_schema(
        request=WebhookUpdateIn,
        responses={200: WebhookOut},
        summary="Change a subscription's URL, event types or description",
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        subscription = self._webhook(pk)
        data = WebhookUpdateIn(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        changed = services.webhook_update(subscription=subscription, **values)
        self.audit(details={"fields": sorted(values)})
        return Response(WebhookOut(changed).data)

    @extend_schema(
        request=None,
        responses={204: OpenApiResponse(description="Deleted, with its deliveries.")},
        summary="Delete a subscription and its delivery log",
    )
    def destroy(self, request: Request, pk: str) -> Response:
        services.webhook_delete(subscription=self._webhook(pk))
        return Response(status=204)

    @extend_schema(
        request=None,
        responses={200: WebhookOut},
        summary="Enable a subscription (its waiting deliveries are due now)",
    )
    @action(detail=True, methods=["post"])
    def enable(self, request: Request, pk: str) -> Response:
        return Response(WebhookOut(services.webhook_enable(subscription=self._webhook(pk))).data)

    @extend_schema(
        request=WebhookDisableIn,
        responses={200: WebhookOut},
        summary="Disable a subscription (its deliveries wait)",
    )
    @action(detail=True, methods=["post"])
    def disable(self, request: Request, pk: str) -> Response:
        subscription = self._webhook(pk)
        data = WebhookDisableIn(data=request.data)
        data.is_valid(raise_exception=True)
        reason = data.validated_data["reason"]
        self.audit(details={"reason": reason})
        return Response(
            WebhookOut(services.webhook_disable(subscription=subscription, reason=reason)).data
        )

    @extend_schema(
        parameters=[DeliveryQuery],
        responses={200: DeliveryOut(many=True)},
        summary="The subscription's deliveries, newest first",
    )
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str) -> Response:
        subscription = self._webhook(pk)
        query = DeliveryQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows: QuerySet[WebhookDelivery] = selectors.delivery_list(subscription=subscription)
        if "status" in query.validated_data:
            rows = rows.filter(status=query.validated_data["status"])
        page = list(rows[: query.validated_data["limit"]])
        return Response({"results": DeliveryOut(page, many=True).data, "next": None})

    @extend_schema(
        parameters=[DELIVERY_ID],
        responses={200: DeliveryDetailOut},
        summary="A delivery and its attempt log",
    )
    @action(detail=True, methods=["get"], url_path=r"deliveries/(?P<delivery_id>[^/.]+)")
    def delivery(self, request: Request, pk: str, delivery_id: str) -> Response:
        found = selectors.delivery_get(subscription=self._webhook(pk), delivery_id=delivery_id)
        found.attempt_log_rows = list(selectors.attempt_list(delivery=found))  # type: ignore[attr-defined]
        return Response(DeliveryDetailOut(found).data)

    @extend_schema(
        parameters=[DELIVERY_ID],
        request=None,
        responses={202: DeliveryOut},
        summary="Send a delivery again (same webhook-id, fresh attempts); 409 while it is open",
    )
    @action(detail=True, methods=["post"], url_path=r"deliveries/(?P<delivery_id>[^/.]+)/redeliver")
    def redeliver(self, request: Request, pk: str, delivery_id: str) -> Response:
        subscription = self._webhook(pk)
        found = selectors.delivery_get(subscription=subscription, delivery_id=delivery_id)
        self.audit(details={"delivery": str(found.id), "webhook_id": found.webhook_id})
        return Response(DeliveryOut(services.delivery_redeliver(delivery=found)).data, status=202)
