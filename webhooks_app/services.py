"""Every write of webhooks: subscriptions (create, change, enable, disable, delete), manual
redelivery, and the delivery loop (:func:`deliver_due`) that the Celery task
``webhooks_app.tasks.deliver`` runs (with Celery) or the reconciler's pass (without it:
:func:`delivers_in_reconciler`).

Locking: a claim is one short transaction (``SKIP LOCKED`` on the due deliveries, then their
timer pushed past the attempt's time limit); the POST runs with no transaction open; its outcome
is written in a second short transaction, fenced by the attempt number the claim took (a late
writer whose claim was taken over writes nothing).
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from openrath_project.cidrs import parse_cidrs
from openrath_project.errors import Conflict, ValidationFailed
from openrath_project.tenancy.models import Project
from openrath_project.tenancy.services import audit_record
from webhooks_app import secrets
from webhooks_app.models import (
    EVENT_TYPES,
    OPEN_STATUSES,
    WebhookAttempt,
    WebhookDelivery,
    WebhookSubscription,
)
from webhooks_app.targets import Target, TargetPolicy, TargetRefused, vet_target

#: Characters of a response body kept in the attempt log.
EXCERPT_CHARS = 500
#: Bytes of a response body read at most (the rest is not downloaded).
READ_LIMIT = 4096
USER_AGENT = "OpenRath-Webhooks/1"


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


def target_policy() -> TargetPolicy:
    """The operator's target rule (``WEBHOOK_ALLOW_PRIVATE_TARGETS``, ``WEBHOOK_ALLOWED_CIDRS``)."""
    return TargetPolicy(
        allow_private=bool(_setting("WEBHOOK_ALLOW_PRIVATE_TARGETS", False)),
        allowed_networks=parse_cidrs(_setting("WEBHOOK_ALLOWED_CIDRS", ())),
    )


#: The longest URL and description a subscription keeps (the columns' sizes).
URL_MAX_CHARS = 2000
DESCRIPTION_MAX_CHARS = 300


def _check_text(field: str, value: str, limit: int) -> None:
    """A 400 for what the column cannot hold (PostgreSQL refuses NUL in text), not a 500."""
    if "\x00" in value:
        raise ValidationFailed(f"{field} may not contain NUL characters", details={field: "NUL"})
    if len(value) > limit:
        raise ValidationFailed(
            f"{field} is longer than {limit} characters", details={field: len(value)}
        )


def _check_target(url: str) -> None:
    _check_text("url", url, URL_MAX_CHARS)
    try:
        vet_target(url, target_policy())
    except TargetRefused as exc:
        raise ValidationFailed(exc.reason, code=exc.code, details={"url": url}) from exc


def _check_types(event_types: list[str]) -> list[str]:
    unknown = sorted(set(event_types) - set(EVENT_TYPES))
    if unknown or not event_types:
        raise ValidationFailed(
            "event_types must name at least one known event type",
            details={"unknown": unknown, "known": list(EVENT_TYPES)},
        )
    return list(dict.fromkeys(event_types))


# --- Subscriptions ---------------------------------------------------------------------------


def webhook_create(
    *,
    project: Project,
    url: str,
    event_types: list[str],
    description: str = "",
    created_by: str = "",
) -> tuple[WebhookSubscription, str]:
    """A subscription and its new signing secret (returned here only: the caller shows it once).
    The URL is checked now (and again at every delivery)."""
    kinds = _check_types(event_types)
    _check_target(url)
    _check_text("description", description, DESCRIPTION_MAX_CHARS)
    secret = secrets.new_secret()
    subscription = WebhookSubscription.objects.create(
        tenant_id=project.tenant_id,
        project=project,
        url=url,
        description=description,
        event_types=kinds,
        secret_ciphertext=secrets.seal(secret),
        secret_hint=secret[-4:],
        created_by=created_by,
    )
    return subscription, secret


def webhook_update(
    *,
    subscription: WebhookSubscription,
    url: str | None = None,
    event_types: list[str] | None = None,
    description: str | None = None,
) -> WebhookSubscription:
    """Change the URL, the event types or the description (the secret stays)."""
    changed: list[str] = []
    if url is not None:
        _check_target(url)
        subscription.url, changed = url, [*changed, "url"]
    if event_types is not None:
        subscription.event_types = _check_types(event_types)
        changed.append("event_types")
    if description is not None:
        _check_text("description", description, DESCRIPTION_MAX_CHARS)
        subscription.description = description
        changed.append("description")
    if changed:
        subscription.save(update_fields=[*changed, "updated_at"])
    return subscription


def webhook_delete(*, subscription: WebhookSubscription) -> None:
    """Delete the subscription with its deliveries and their attempt log."""
    subscription.delete()


def webhook_enable(*, subscription: WebhookSubscription) -> WebhookSubscription:
    """Enable a subscription: its waiting deliveries are due again now, the failure streak
    starts over."""
    now = timezone.now()
    with transaction.atomic():
        WebhookSubscription.objects.unscoped().filter(id=subscription.id).update(
            enabled=True,
            disabled_reason="",
            disabled_at=None,
            consecutive_failures=0,
            failing_since=None,
            updated_at=now,
        )
        WebhookDelivery.objects.unscoped().filter(
            subscription_id=subscription.id, status__in=OPEN_STATUSES
        ).update(next_attempt_at=now, updated_at=now)
    subscription.refresh_from_db()
    return subscription


def webhook_disable(*, subscription: WebhookSubscription, reason: str) -> WebhookSubscription:
    """Disable a subscription (``reason`` is kept); its open deliveries wait."""
    now = timezone.now()
    WebhookSubscription.objects.unscoped().filter(id=subscription.id).update(
        enabled=False, disabled_reason=(reason or "disabled")[:300], disabled_at=now, updated_at=now
    )
    subscription.refresh_from_db()
    return subscription


def delivery_redeliver(*, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send a delivery again now, with the same ``webhook-id`` (a receiver that deduplicates
    sees the same message) and a fresh budget of attempts. An open delivery is already on its
    way: a 409."""
    now = timezone.now()
    updated = (
        WebhookDelivery.objects.unscoped()
        .filter(id=delivery.id, status__in=("succeeded", "dead"))
        .update(
            status="pending",
            next_attempt_at=now,
            round_attempts=0,
            updated_at=now,
        )
    )
    if not updated:
        raise Conflict(
            "the delivery is still being attempted",
            code="delivery_open",
            details={"status": delivery.status},
        )
    delivery.refresh_from_db()
    return delivery


# --- Delivery --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claimed:
    """A delivery this worker holds for one attempt (number ``attempt``)."""

    id: Any
    attempt: int
    round_attempts: int
    tenant_id: Any
    subscription_id: Any
    webhook_id: str
    payload: dict[str, Any]
    url: str
    secret_ciphertext: str
    #: The clock of the pass that claimed it: the retry timer counts from here.
    claimed_at: datetime


@dataclass(frozen=True)
class AttemptResult:
    """What one POST got: a 2xx is ``succeeded``; anything else is retried."""

    succeeded: bool
    started_at: datetime
    latency_ms: int
    status_code: int | None = None
    error: str = ""
    response_excerpt: str = ""


@dataclass
class DeliveryTick:
    """What one :func:`deliver_due` pass did."""

    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    disabled: list[Any] = field(default_factory=list)

    @property
    def attempted(self) -> int:
        return self.succeeded + self.failed + self.dead


def max_attempts() -> int:
    """Attempts per round before a delivery is given up (``WEBHOOK_MAX_ATTEMPTS``)."""
    return int(_setting("WEBHOOK_MAX_ATTEMPTS", 10))


def _timeout() -> float:
    return float(_setting("WEBHOOK_TIMEOUT_SECONDS", 10.0))


def deliveries_claim(*, now: datetime, limit: int) -> list[Claimed]:
    """Claim up to ``limit`` due deliveries of enabled subscriptions, oldest timer first: rows
    another worker holds are skipped (``SKIP LOCKED``), and each claimed row's timer moves past
    the attempt's time limit, so the claim is released by the commit, not held over the POST."""
    hold = now + timedelta(seconds=_timeout() + 60)
    with transaction.atomic():
        ids = list(
            WebhookDelivery.objects.unscoped()
            .select_for_update(skip_locked=True, of=("self",))
            .filter(status__in=OPEN_STATUSES, next_attempt_at__lte=now, subscription__enabled=True)
            .order_by("next_attempt_at", "id")
            .values_list("id", flat=True)[:limit]
        )
        if not ids:
            return []
        WebhookDelivery.objects.unscoped().filter(id__in=ids).update(
            attempts=F("attempts") + 1,
            round_attempts=F("round_attempts") + 1,
            next_attempt_at=hold,
            updated_at=now,
        )
        rows = (
            WebhookDelivery.objects.unscoped()
            .filter(id__in=ids)
            .select_related("subscription")
            .order_by("next_attempt_at", "id")
        )
        return [
            Claimed(
                id=row.id,
                attempt=row.attempts,
                round_attempts=row.round_attempts,
                tenant_id=row.tenant_id,
                subscription_id=row.subscription_id,
                webhook_id=row.webhook_id,
                payload=row.payload,
                url=row.subscription.url,
                secret_ciphertext=row.subscription.secret_ciphertext,
                claimed_at=now,
            )
            for row in rows
        ]


def signed_headers(*, secret: str, webhook_id: str, body: str, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt (signed with ``standardwebhooks``)."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(webhook_id, at, body),
    }


def _connect_url(target: Target) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The URL to the checked address (not a second DNS lookup), the Host header and, for
    https, the name the TLS handshake sends and verifies (SNI)."""
    address = target.addresses[0]
    literal = f"[{address}]" if address.version == 6 else str(address)
    parts = urlsplit(target.url)
    netloc = f"{literal}:{target.port}"
    default_port = 443 if target.scheme == "https" else 80
    name = f"[{target.host}]" if ":" in target.host else target.host  # an IPv6 literal
    host_header = name if target.port == default_port else f"{name}:{target.port}"
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    return urlunsplit(parts._replace(netloc=netloc)), {"host": host_header}, extensions


def http_client() -> httpx2.Client:
    """The client of a delivery pass: the attempt timeout, redirects not followed, no proxy
    or other settings from the environment."""
    return httpx2.Client(timeout=_timeout(), follow_redirects=False, trust_env=False)


def delivery_post(claimed: Claimed, client: httpx2.Client | None = None) -> AttemptResult:
    """POST one claimed delivery: the target checked again (resolved, every address vetted,
    the connection made to the vetted address), signed, redirects not followed. No lock or
    transaction is open here."""
    started_at = timezone.now()
    clock = time.monotonic()

    def result(**fields: Any) -> AttemptResult:
        latency = int((time.monotonic() - clock) * 1000)
        return AttemptResult(started_at=started_at, latency_ms=latency, **fields)

    try:
        target = vet_target(claimed.url, target_policy())
        secret = secrets.unseal(claimed.secret_ciphertext)
    except TargetRefused as exc:
        return result(succeeded=False, error=f"target refused: {exc.reason}"[:300])
    except secrets.SecretUnreadable as exc:
        return result(succeeded=False, error=str(exc)[:300])
    body = json.dumps(claimed.payload, separators=(",", ":"), ensure_ascii=False)
    url, host, extensions = _connect_url(target)
    headers = {
        **host,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        **signed_headers(secret=secret, webhook_id=claimed.webhook_id, body=body, at=started_at),
    }
    try:
        with (
            contextlib.nullcontext(client) if client is not None else http_client() as http,
            http.stream(
                "POST", url, content=body.encode(), headers=headers, extensions=extensions
            ) as response,
        ):
            received = b""
            for chunk in response.iter_bytes():
                received += chunk
                if len(received) >= READ_LIMIT:
                    break
            excerpt = received[:READ_LIMIT].decode("utf-8", "replace")[:EXCERPT_CHARS]
            code = response.status_code
    except httpx2.TimeoutException:
        return result(succeeded=False, error=f"timed out after {_timeout():g}s")
    except httpx2.HTTPError as exc:
        return result(succeeded=False, error=f"{type(exc).__name__}: {exc}"[:300])
    if 300 <= code < 400:
        location = response.headers.get("location", "")
        return result(
            succeeded=False,
            status_code=code,
            error=f"redirect not followed (to {location})"[:300],
            response_excerpt=excerpt,
        )
    return result(succeeded=200 <= code < 300, status_code=code, response_excerpt=excerpt)


def retry_delay(attempt: int, *, rng: random.Random | None = None) -> float:
    """Seconds before retry ``attempt + 1``: exponential from ``WEBHOOK_RETRY_BASE_SECONDS``
    (doubling per attempt, capped at ``WEBHOOK_RETRY_MAX_SECONDS``) with jitter: a uniform draw
    from the upper half of that delay, so receivers coming back are not hit by every sender at
    once."""
    base = float(_setting("WEBHOOK_RETRY_BASE_SECONDS", 30.0))
    cap = float(_setting("WEBHOOK_RETRY_MAX_SECONDS", 6 * 3600.0))
    delay = min(cap, base * 2 ** max(0, attempt - 1))
    return (rng or random).uniform(delay / 2, delay)  # noqa: S311 - jitter, not a secret


def delivery_record(claimed: Claimed, outcome: AttemptResult) -> str | None:
    """Write an attempt's outcome: the attempt log row, the delivery's status and timer, the
    subscription's failure streak (and its automatic disabling). Fenced by the attempt number:
    ``None`` (nothing written) when another worker took the delivery over meanwhile."""
    now = timezone.now()
    if outcome.succeeded:
        status, next_at = "succeeded", None
    elif claimed.round_attempts >= max_attempts():
        status, next_at = "dead", None
    else:
        delay = timedelta(seconds=retry_delay(claimed.attempt))
        status, next_at = "failed", max(now, claimed.claimed_at) + delay
    with transaction.atomic():
        updated = (
            WebhookDelivery.objects.unscoped()
            .filter(id=claimed.id, attempts=claimed.attempt, status__in=OPEN_STATUSES)
            .update(
                status=status,
                next_attempt_at=next_at,
                last_status_code=outcome.status_code,
                last_latency_ms=outcome.latency_ms,
                last_error=outcome.error,
                last_response=outcome.response_excerpt,
                delivered_at=now if outcome.succeeded else None,
                updated_at=now,
            )
        )
        if not updated:
            return None
        WebhookAttempt.objects.create(
            tenant_id=claimed.tenant_id,
            delivery_id=claimed.id,
            number=claimed.attempt,
            started_at=outcome.started_at,
            succeeded=outcome.succeeded,
            status_code=outcome.status_code,
            latency_ms=outcome.latency_ms,
            error=outcome.error,
            response_excerpt=outcome.response_excerpt,
        )
        subscriptions = WebhookSubscription.objects.unscoped().filter(id=claimed.subscription_id)
        if outcome.succeeded:
            subscriptions.update(consecutive_failures=0, failing_since=None, last_success_at=now)
        else:
            subscriptions.update(
                consecutive_failures=F("consecutive_failures") + 1,
                failing_since=Coalesce(F("failing_since"), now),
            )
    return status


def _disable_if_failing(subscription_id: Any, now: datetime) -> bool:
    """Disable the subscription when its failures in a row reached
    ``WEBHOOK_DISABLE_AFTER_FAILURES`` *and* the streak is ``WEBHOOK_DISABLE_AFTER_SECONDS``
    old (both: a burst of failures in a minute does not disable it, nor does one failure a day).
    One conditional update: concurrent workers disable it once."""
    failures = int(_setting("WEBHOOK_DISABLE_AFTER_FAILURES", 20))
    seconds = float(_setting("WEBHOOK_DISABLE_AFTER_SECONDS", 24 * 3600.0))
    candidates = WebhookSubscription.objects.unscoped().filter(
        id=subscription_id,
        enabled=True,
        consecutive_failures__gte=failures,
        failing_since__lte=now - timedelta(seconds=seconds),
    )
    row = candidates.select_related("project").first()
    if row is None:
        return False
    reason = f"disabled after {row.consecutive_failures} failed attempts in a row"
    if not candidates.update(enabled=False, disabled_reason=reason, disabled_at=now):
        return False
    audit_record(
        actor="system:webhooks",
        action="webhook.auto_disable",
        outcome="success",
        tenant=row.project.tenant,
        project=row.project,
        object_type="webhook",
        object_id=str(row.id),
        details={"consecutive_failures": row.consecutive_failures, "reason": reason},
    )
    return True


def delivers_in_reconciler() -> bool:
    """Whether the reconciler's pass delivers webhooks itself: only where there is no Celery
    (``OPENRATH_DISPATCH`` ``local``: the embedded threads; ``none``: database workers). With
    Celery (``celery``, production) beat sends the delivery task to its own queue
    (``webhooks_app.DELIVERY_QUEUE``) instead, so a slow receiver never lengthens a reconciler
    pass."""
    return str(_setting("OPENRATH_DISPATCH", "local")) != "celery"


def deliver_due(
    *, now: datetime | None = None, limit: int | None = None, batch: int = 5
) -> DeliveryTick:
    """Attempt due deliveries, ``batch`` claimed at a time, up to ``limit``
    (``WEBHOOK_TICK_LIMIT``) or until ``WEBHOOK_TICK_SECONDS`` have passed (a pass may overrun
    it by one batch of attempt timeouts). Safe to run in any number of processes at once. The
    delivery task (or the reconciler, :func:`delivers_in_reconciler`) calls it every few
    seconds; with nothing due it is one indexed query."""
    limit = int(_setting("WEBHOOK_TICK_LIMIT", 50)) if limit is None else limit
    budget = float(_setting("WEBHOOK_TICK_SECONDS", 10.0))
    started = time.monotonic()
    tick = DeliveryTick()
    claimed = deliveries_claim(now=now or timezone.now(), limit=min(batch, limit))
    if not claimed:
        return tick
    with http_client() as client:  # one connection pool for the pass, opened only when needed
        while claimed:
            for delivery in claimed:
                _attempt(tick, delivery, client)
            if tick.attempted >= limit or time.monotonic() - started >= budget:
                break
            claimed = deliveries_claim(
                now=now or timezone.now(), limit=min(batch, limit - tick.attempted)
            )
    return tick


def _attempt(tick: DeliveryTick, delivery: Claimed, client: httpx2.Client) -> None:
    status = delivery_record(delivery, delivery_post(delivery, client))
    if status == "succeeded":
        tick.succeeded += 1
    elif status == "dead":
        tick.dead += 1
    elif status == "failed":
        tick.failed += 1
    if status in ("failed", "dead") and _disable_if_failing(
        delivery.subscription_id, timezone.now()
    ):
        tick.disabled.append(delivery.subscription_id)
