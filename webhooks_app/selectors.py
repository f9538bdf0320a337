"""Scoped reads of webhook subscriptions, their deliveries and the attempt log."""

from __future__ import annotations

from django.db.models import QuerySet

from openrath_project.errors import NotFound
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import parse_uuid
from webhooks_app.models import WebhookAttempt, WebhookDelivery, WebhookSubscription


def webhook_list(*, principal: Principal) -> QuerySet[WebhookSubscription]:
    """Subscriptions in the principal's tenant and projects."""
    return WebhookSubscription.objects.for_principal(principal)


def webhook_get(*, principal: Principal, webhook_id: object) -> WebhookSubscription:
    """A subscription in scope, or 404 (another tenant's is indistinguishable from a missing
    one)."""
    as_uuid = parse_uuid(webhook_id)
    found = (
        webhook_list(principal=principal).select_related("project").filter(id=as_uuid).first()
        if as_uuid
        else None
    )
    if found is None:
        raise NotFound("webhook not found", details={"webhook": str(webhook_id)})
    return found


def delivery_list(*, subscription: WebhookSubscription) -> QuerySet[WebhookDelivery]:
    """The deliveries of a subscription read in scope, newest first."""
    # scope: the subscription was read through webhook_get
    return (
        WebhookDelivery.objects.unscoped()
        .filter(subscription_id=subscription.id)
        .order_by("-created_at", "-id")
    )


def delivery_get(*, subscription: WebhookSubscription, delivery_id: object) -> WebhookDelivery:
    """One delivery of a subscription read in scope, or 404."""
    as_uuid = parse_uuid(delivery_id)
    found = delivery_list(subscription=subscription).filter(id=as_uuid).first() if as_uuid else None
    if found is None:
        raise NotFound("delivery not found", details={"delivery": str(delivery_id)})
    return found


def attempt_list(*, delivery: WebhookDelivery) -> QuerySet[WebhookAttempt]:
    """The attempts of a delivery read in scope, first attempt first."""
    # scope: the delivery was read through delivery_get
    return WebhookAttempt.objects.unscoped().filter(delivery_id=delivery.id).order_by("number")
