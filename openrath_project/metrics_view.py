"""``GET /metrics``: this machine's process metrics plus gauges read from the database.

The process metrics and the helpers that observe them are the core's
(:mod:`openrath_project.metrics`: the executor, the run services, the consumers and the HTTP
middleware observe into them). The database gauges read the runs and effects apps' tables, so
they live here, in the shell, with the view that serves both (docs/operations.md, "Metrics"):
``openrath_runs{status}``, ``openrath_queue_depth``, ``openrath_effects_needing_review``,
``openrath_interrupts_pending`` and ``openrath_metrics_database_ok``. Computed at scrape time,
so any web process answers them the same.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.registry import Collector

from effects_app.models import EffectRecord
from openrath_project.cidrs import Network, parse_cidrs
from openrath_project.errors import error_body
from openrath_project.metrics import process_registry
from runs_app.models import Interrupt, Run
from runs_app.transitions import STATUSES

logger = logging.getLogger(__name__)


# --- Database gauges ------------------------------------------------------------------------------


def database_gauges() -> dict[str, Any]:
    """The run counts by status, the claimable queue, effects in review, pending interrupts.

    Three aggregate queries (the run counts and the claimable queue in one GROUP BY), across
    every tenant: no tenant is named in the output.
    """
    now = timezone.now()
    claimable = Q(status="queued") & (Q(wake_at__isnull=True) | Q(wake_at__lte=now))
    by_status: dict[str, int] = {}
    queue_depth = 0
    rows = (
        Run.objects.order_by()
        .values("status")
        .annotate(n=Count("id"), c=Count("id", filter=claimable))
    )
    for row in rows:
        by_status[row["status"]] = int(row["n"])
        queue_depth += int(row["c"])
    return {
        "runs": by_status,
        "queue_depth": queue_depth,
        "effects_needing_review": EffectRecord.objects.filter(status="needs_review").count(),
        "interrupts_pending": Interrupt.objects.filter(status="pending").count(),
    }


class DatabaseCollector(Collector):
    """Gauges read from the database at scrape time; a database outage yields
    ``openrath_metrics_database_ok 0`` instead of an error page."""

    def collect(self) -> Iterable[Metric]:
        ok = GaugeMetricFamily(
            "openrath_metrics_database_ok",
            "1 when the database gauges of this scrape could be read.",
        )
        try:
            values = database_gauges()
        except Exception:  # a scrape must not fail because the database did
            logger.exception("could not read the database gauges for /metrics")
            ok.add_metric([], 0)
            yield ok
            return
        runs = GaugeMetricFamily("openrath_runs", "Runs by status.", labels=["status"])
        for status in STATUSES:
            runs.add_metric([status], values["runs"].get(status, 0))
        yield runs
        yield GaugeMetricFamily(
            "openrath_queue_depth",
            "Queued runs a worker may claim now (no retry timer pending).",
            value=values["queue_depth"],
        )
        yield GaugeMetricFamily(
            "openrath_effects_needing_review",
            "Effects waiting for an operator's decision.",
            value=values["effects_needing_review"],
        )
        yield GaugeMetricFamily(
            "openrath_interrupts_pending",
            "Interrupts waiting for a person.",
            value=values["interrupts_pending"],
        )
        ok.add_metric([], 1)
        yield ok

    def describe(self) -> Iterable[Metric]:
        return []  # registering must not query the database


class _Combined:
    """Collects from several registries (what ``generate_latest`` needs: ``collect()``)."""

    def __init__(self, *sources: Any) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()


@lru_cache(maxsize=1)
def _database_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return registry


def render(*, openmetrics: bool = False) -> bytes:
    """The Prometheus text exposition of ``/metrics`` (OpenMetrics, with the step histogram's
    trace exemplars, when the scraper asks for it)."""
    combined = _Combined(process_registry(), _database_registry())
    return openmetrics_latest(combined) if openmetrics else generate_latest(combined)


# --- GET /metrics ---------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _networks(cidrs: tuple[str, ...]) -> tuple[Network, ...]:
    return parse_cidrs(cidrs)


def client_allowed(remote_addr: str) -> bool:
    """Whether ``remote_addr`` may scrape: any address when ``OPENRATH_METRICS_ALLOWED_CIDRS``
    is empty, otherwise one inside those networks. The peer address is used, never
    ``X-Forwarded-For``: scrape the pods directly, not through the public ingress."""
    cidrs = tuple(getattr(settings, "OPENRATH_METRICS_ALLOWED_CIDRS", ()) or ())
    if not cidrs:
        return True
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in _networks(cidrs))


@require_GET
@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text format; no authentication, restricted by source network when set."""
    if not client_allowed(request.META.get("REMOTE_ADDR", "")):
        return JsonResponse(
            error_body("permission_denied", "metrics are not served to this address"),
            status=403,
        )
    if "application/openmetrics-text" in request.headers.get("Accept", ""):
        return HttpResponse(render(openmetrics=True), content_type=OPENMETRICS_TYPE)
    return HttpResponse(render(), content_type=CONTENT_TYPE_LATEST)
