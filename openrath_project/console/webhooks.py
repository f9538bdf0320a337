"""Console pages of webhooks: the subscriptions of the chosen projects (create, enable, disable,
delete) and a subscription's delivery log with each attempt (redeliver).

Thin callers of ``webhooks_app``'s selectors and services, like the API: reading needs
``projects:read``, every change ``projects:write`` (a viewer's POST is a 403 that changes
nothing); the middleware audits each action under the API's action names. The signing secret
is in the answer to the create request only (never stored in the session, never shown again).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from openrath_project.api.audit import audit_note
from openrath_project.console.access import Console, console_page
from openrath_project.console.views import ActionError, _base, _filtered
from openrath_project.errors import DomainError
from openrath_project.tenancy.selectors import project_get
from webhooks_app import selectors, services
from webhooks_app.models import EVENT_TYPES, WebhookAttempt, WebhookDelivery, WebhookSubscription

#: Subscriptions listed on the page (the API pages through the rest).
WEBHOOKS_SHOWN = 200
#: Deliveries shown in a subscription's log, newest first (the API filters by status).
DELIVERIES_SHOWN = 50
#: How a delivery's status is drawn (the console's status badges).
STATUS_CLASS = {
    "pending": "status-queued",
    "failed": "status-waiting",
    "succeeded": "status-succeeded",
    "dead": "status-failed",
}
GRANT_READ = "projects:read"
GRANT_WRITE = "projects:write"


@dataclass
class WebhookRow:
    subscription: WebhookSubscription
    last: WebhookDelivery | None

    @property
    def last_class(self) -> str:
        return STATUS_CLASS.get(self.last.status, "") if self.last is not None else ""


@dataclass
class DeliveryRow:
    delivery: WebhookDelivery
    attempts: list[WebhookAttempt]

    @property
    def status_class(self) -> str:
        return STATUS_CLASS.get(self.delivery.status, "")

    @property
    def closed(self) -> bool:
        """Succeeded or dead: it may be sent again (an open one is on its way)."""
        return self.delivery.status in ("succeeded", "dead")


_FORM_FIELDS = ("project", "url", "description")


def _list_page(
    request: HttpRequest,
    console: Console,
    *,
    error: ActionError | None = None,
    form: dict[str, object] | None = None,
    created: WebhookSubscription | None = None,
    secret: str = "",
    status: int = 200,
) -> HttpResponse:
    listed = list(
        _filtered(selectors.webhook_list(principal=console.principal), console)
        .select_related("project")
        .order_by("-created_at", "-id")[:WEBHOOKS_SHOWN]
    )
    last = selectors.latest_deliveries(subscriptions=listed)
    response = render(
        request,
        "console/webhooks.html",
        _base(
            console,
            rows=[WebhookRow(subscription=s, last=last.get(s.id)) for s in listed],
            can_change=console.principal.has_grant(GRANT_WRITE),
            shown=WEBHOOKS_SHOWN,
            event_types=EVENT_TYPES,
            error=error,
            form=form or {"event_types": []},
            created=created,
            secret=secret,
        ),
        status=status,
    )
    if secret:
        response["Cache-Control"] = "no-store"  # the secret is in this answer only
    return response


@require_GET
@console_page(grant=GRANT_READ)
def webhooks(request: HttpRequest, console: Console) -> HttpResponse:
    return _list_page(request, console)


@require_POST
@console_page(grant=GRANT_WRITE, action="webhook.create", object_type="webhook")
def webhook_create_view(request: HttpRequest, console: Console) -> HttpResponse:
    fields = {name: request.POST.get(name, "").strip() for name in _FORM_FIELDS}
    kinds = request.POST.getlist("event_types")
    form: dict[str, object] = {**fields, "event_types": kinds}
    try:
        project = project_get(principal=console.principal, ref=fields["project"])
        audit_note(request, project=project)
        subscription, secret = services.webhook_create(
            project=project,
            url=fields["url"],
            event_types=kinds,
            description=fields["description"],
            created_by=console.principal.actor,
        )
    except DomainError as exc:
        audit_note(request, details={"error_code": exc.code, "via": "console"})
        return _list_page(
            request, console, error=ActionError.of(exc), form=form, status=exc.status_code
        )
    audit_note(
        request,
        object_id=subscription.id,
        details={
            "url": subscription.url,
            "event_types": subscription.event_types,
            "via": "console",
        },
    )
    # Rendered, not redirected: a redirect would have to keep the secret somewhere until the
    # next request. Reloading this answer would post the form again (the browser asks first).
    return _list_page(request, console, created=subscription, secret=secret, status=201)


def _subscription(
    request: HttpRequest, console: Console, webhook_id: uuid.UUID
) -> WebhookSubscription:
    subscription = selectors.webhook_get(principal=console.principal, webhook_id=webhook_id)
    audit_note(request, object_id=subscription.id, project=subscription.project)
    return subscription


def _detail_page(
    request: HttpRequest,
    console: Console,
    subscription: WebhookSubscription,
    *,
    error: ActionError | None = None,
    status: int = 200,
) -> HttpResponse:
    deliveries = list(selectors.delivery_list(subscription=subscription)[:DELIVERIES_SHOWN])
    attempts = selectors.attempts_by_delivery(deliveries=deliveries)
    return render(
        request,
        "console/webhook.html",
        _base(
            console,
            subscription=subscription,
            rows=[DeliveryRow(delivery=d, attempts=attempts.get(d.id, [])) for d in deliveries],
            shown=DELIVERIES_SHOWN,
            can_change=console.principal.has_grant(GRANT_WRITE),
            error=error,
        ),
        status=status,
    )


@require_GET
@console_page(grant=GRANT_READ)
def webhook_detail(request: HttpRequest, console: Console, webhook_id: uuid.UUID) -> HttpResponse:
    subscription = selectors.webhook_get(principal=console.principal, webhook_id=webhook_id)
    return _detail_page(request, console, subscription)


@require_POST
@console_page(grant=GRANT_WRITE, action="webhook.enable", object_type="webhook")
def webhook_enable_view(
    request: HttpRequest, console: Console, webhook_id: uuid.UUID
) -> HttpResponse:
    subscription = _subscription(request, console, webhook_id)
    services.webhook_enable(subscription=subscription)
    audit_note(request, details={"via": "console"})
    messages.success(request, f"Enabled {subscription}: its waiting deliveries are due now.")
    return redirect("console:webhook", webhook_id=subscription.id)


@require_POST
@console_page(grant=GRANT_WRITE, action="webhook.disable", object_type="webhook")
def webhook_disable_view(
    request: HttpRequest, console: Console, webhook_id: uuid.UUID
) -> HttpResponse:
    subscription = _subscription(request, console, webhook_id)
    reason = request.POST.get("reason", "").replace("\x00", "\ufffd").strip()[:300]
    reason = reason or "disabled by a user"
    audit_note(request, details={"reason": reason, "via": "console"})
    services.webhook_disable(subscription=subscription, reason=reason)
    messages.success(request, f"Disabled {subscription}: its deliveries wait.")
    return redirect("console:webhook", webhook_id=subscription.id)


@require_POST
@console_page(grant=GRANT_WRITE, action="webhook.delete", object_type="webhook")
def webhook_delete_view(
    request: HttpRequest, console: Console, webhook_id: uuid.UUID
) -> HttpResponse:
    subscription = _subscription(request, console, webhook_id)
    services.webhook_delete(subscription=subscription)
    audit_note(request, details={"via": "console"})
    messages.success(request, f"Deleted the subscription to {subscription} and its deliveries.")
    return redirect("console:webhooks")


@require_POST
@console_page(grant=GRANT_WRITE, action="webhook.redeliver", object_type="webhook")
def delivery_redeliver_view(
    request: HttpRequest, console: Console, webhook_id: uuid.UUID, delivery_id: uuid.UUID
) -> HttpResponse:
    subscription = _subscription(request, console, webhook_id)
    found = selectors.delivery_get(subscription=subscription, delivery_id=delivery_id)
    audit_note(
        request,
        details={"delivery": str(found.id), "webhook_id": found.webhook_id, "via": "console"},
    )
    try:
        services.delivery_redeliver(delivery=found)
    except DomainError as exc:
        audit_note(request, details={"error_code": exc.code})
        return _detail_page(
            request,
            console,
            subscription,
            error=ActionError.of(exc, found.id),
            status=exc.status_code,
        )
    messages.success(request, f"Delivery {found.webhook_id} is due again (same webhook-id).")
    return redirect("console:webhook", webhook_id=subscription.id)
