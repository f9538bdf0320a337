"""Prometheus process metrics: the instruments, the helpers that observe into them, the
process registry, a worker's metrics port and the HTTP middleware.

What is exported (docs/operations.md, "Metrics"): ``openrath_step_duration_seconds{workflow,
outcome}`` (executor), ``openrath_lease_expiries_total{action}`` and
``openrath_retries_total{workflow}`` (run services), ``openrath_websocket_connections{stream}``
(consumers, via :func:`ws_connected` / :func:`ws_disconnected`),
``openrath_http_request_duration_seconds{method, route, status_class}`` (middleware).
``GET /metrics`` serves them together with the database gauges, which read the apps' tables
and so live in the shell (:mod:`openrath_project.metrics_view`).

Web, Celery and ``run_worker`` processes are separate processes. With
``PROMETHEUS_MULTIPROC_DIR`` set (before the process starts; one directory per machine, emptied
when the machine's processes are (re)started) every process writes its values there and any
process's ``/metrics`` (or ``--metrics-port``) reports the sum for the machine. Without it each
process reports its own values.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import lru_cache
from typing import Any

from django.http import HttpRequest, HttpResponse
from opentelemetry import trace
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

logger = logging.getLogger(__name__)

#: Set in the environment before the process starts (prometheus_client reads it at import).
MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")

# --- Process metrics ------------------------------------------------------------------------------

STEP_DURATION = Histogram(
    "openrath_step_duration_seconds",
    "Time a step's handler ran, by workflow and outcome "
    "(completed, failed, timed_out, waiting, needs_review, lost).",
    ["workflow", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
LEASE_EXPIRIES = Counter(
    "openrath_lease_expiries",
    "Runs whose lease expired (a worker died or froze), by what the reconciler did: "
    "requeued, or failed after too many lost workers.",
    ["action"],
)
RETRIES = Counter(
    "openrath_retries",
    "Step retries scheduled (a failed attempt with attempts left), by workflow.",
    ["workflow"],
)
WEBSOCKET_CONNECTIONS = Gauge(
    "openrath_websocket_connections",
    "Open WebSocket connections, by stream (sessions, runs).",
    ["stream"],
    multiprocess_mode="livesum",
)
HTTP_REQUEST_DURATION = Histogram(
    "openrath_http_request_duration_seconds",
    "HTTP request duration by method, route name and status class.",
    ["method", "route", "status_class"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)

WEBSOCKET_STREAMS = frozenset({"sessions", "runs"})
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def ws_connected(stream: str = "other") -> None:
    """A WebSocket connection was accepted (``stream``: ``"sessions"`` or ``"runs"``)."""
    WEBSOCKET_CONNECTIONS.labels(stream=_stream(stream)).inc()


def ws_disconnected(stream: str = "other") -> None:
    """A WebSocket connection that :func:`ws_connected` counted was closed."""
    WEBSOCKET_CONNECTIONS.labels(stream=_stream(stream)).dec()


def _stream(stream: str) -> str:
    return stream if stream in WEBSOCKET_STREAMS else "other"


#: Exception class name -> step outcome; anything else is ``failed``.
_STEP_OUTCOMES = {
    "StepSuspended": "waiting",
    "LeaseLost": "lost",
    "StaleLease": "lost",
    "StaleFence": "lost",
    "NeedsReview": "needs_review",
    "DeadlineExceeded": "timed_out",
    "StepTimeout": "timed_out",
    "TimeoutError": "timed_out",
}


def step_outcome(exc: BaseException | None) -> str:
    """The outcome label of a step that raised ``exc`` (``None``: it returned)."""
    if exc is None:
        return "completed"
    for cls in type(exc).__mro__:
        if cls.__name__ in _STEP_OUTCOMES:
            return _STEP_OUTCOMES[cls.__name__]
    return "failed"


@contextmanager
def observe_step(workflow: str) -> Iterator[None]:
    """Time the block (a step's handler) into ``openrath_step_duration_seconds``."""
    started = time.perf_counter()
    error: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        error = exc
        raise
    finally:
        STEP_DURATION.labels(workflow=workflow, outcome=step_outcome(error)).observe(
            time.perf_counter() - started, exemplar=trace_exemplar()
        )


def trace_exemplar() -> dict[str, str] | None:
    """The current span as an exemplar (OpenMetrics scrapes show it beside the sample and
    Grafana links it to the trace); none without a recording span, or in multiprocess mode,
    whose files hold no exemplars."""
    span = trace.get_current_span()
    ids = span.get_span_context()
    if MULTIPROC_DIR or not span.is_recording() or not ids.is_valid:
        return None
    return {"trace_id": format(ids.trace_id, "032x"), "span_id": format(ids.span_id, "016x")}


def lease_expired(*, action: str) -> None:
    """The reconciler found an expired lease and ``requeued`` (or ``failed``) its run."""
    LEASE_EXPIRIES.labels(action=action).inc()


def retry_scheduled(*, workflow: str) -> None:
    RETRIES.labels(workflow=workflow).inc()


@lru_cache(maxsize=1)
def process_registry() -> Any:
    """This machine's process metrics: every process's files in multiprocess mode, else this
    process's default registry (with the process and platform collectors)."""
    if MULTIPROC_DIR:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=MULTIPROC_DIR)
        return registry
    return REGISTRY


def start_metrics_server(port: int, addr: str = "0.0.0.0") -> None:  # noqa: S104 - scraped from outside
    """Serve this machine's process metrics on ``addr:port`` (a worker's ``--metrics-port``)."""
    from prometheus_client import start_http_server

    start_http_server(port, addr=addr, registry=process_registry())
    logger.info(
        "serving metrics on %s:%s (%s)",
        addr,
        port,
        "multiprocess: this machine" if MULTIPROC_DIR else "this process",
    )


def _mark_this_process_dead() -> None:
    from prometheus_client import multiprocess

    with suppress(OSError):
        multiprocess.mark_process_dead(os.getpid(), path=MULTIPROC_DIR)


if MULTIPROC_DIR:
    # A process that exits stops counting in "live" gauges (open WebSockets).
    atexit.register(_mark_this_process_dead)


# --- HTTP request durations -----------------------------------------------------------------------

Handler = Callable[[HttpRequest], HttpResponse]


def _route(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "unmatched"
    return match.view_name or match.route or "unnamed"


class HttpMetricsMiddleware:
    """Observes every request into ``openrath_http_request_duration_seconds``.

    First in ``MIDDLEWARE`` so the time includes every other middleware. Labels stay bounded:
    the route is the URL pattern's name (never the path), unknown methods are ``OTHER``.
    """

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = self.get_response(request)
            status = response.status_code
            return response
        finally:
            method = request.method if request.method in HTTP_METHODS else "OTHER"
            HTTP_REQUEST_DURATION.labels(
                method=method, route=_route(request), status_class=f"{status // 100}xx"
            ).observe(time.perf_counter() - started)
