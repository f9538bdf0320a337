"""Scoped reads of webhook subscriptions, their deliveries and the attempt log."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery

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


def latest_deliveries(
    *, subscriptions: Iterable[WebhookSubscription]
) -> dict[Any, WebhookDelivery]:
    """The newest delivery of each subscription read in scope (two queries whatever their
    number); a subscription without deliveries is missing from the answer."""
    ids = [s.id for s in subscriptions]
    newest = (
        # scope: deliveries of the subscriptions read in scope
        WebhookDelivery.objects.unscoped()
        .filter(subscription_id=OuterRef("pk"))
        .order_by("-created_at", "-id")
        .values("id")[:1]
    )
    latest = (
        # scope: the same subscriptions, read in scope by the caller
        WebhookSubscription.objects.unscoped()
        .filter(id__in=ids)
        .annotate(latest=Subquery(newest))
        .values_list("latest", flat=True)
    )
    # scope: ids of those subscriptions' own deliveries
    rows = WebhookDelivery.objects.unscoped().filter(id__in=[i for i in latest if i is not None])
    return {row.subscription_id: row for row in rows}


def attempts_by_delivery(
    *, deliveries: Iterable[WebhookDelivery]
) -> dict[Any, list[WebhookAttempt]]:
    """The attempt log of each delivery read in scope, first attempt first, in one query."""
    found: dict[Any, list[WebhookAttempt]] = {}
    # scope: the deliveries were read through delivery_list / delivery_get
    rows = WebhookAttempt.objects.unscoped().filter(delivery_id__in=[d.id for d in deliveries])
    for attempt in rows.order_by("delivery_id", "number"):
        found.setdefault(attempt.delivery_id, []).append(attempt)
    return found
