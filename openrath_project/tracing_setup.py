"""The OpenTelemetry SDK of a process: set up once, exporting only when asked to.

:func:`configure_tracing` is called by every entry point (ASGI/WSGI before Django loads its
middleware, ``run_worker`` and Celery through the start-up guard, each Celery prefork child, and
lazily by the executor for embedded worker threads and library scripts). It does nothing unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set and
``OTEL_SDK_DISABLED`` / ``OTEL_TRACES_EXPORTER=none`` do not turn it off: without it no tracer
provider is installed and every span of the product is the API's no-op.

When on, it installs a tracer provider exporting OTLP over HTTP (the standard ``OTEL_*``
variables: endpoint, headers, timeout, service name, resource attributes, sampler) through a
bounded queue, and the maintained instrumentations of Django, Celery, psycopg, Redis, httpx2 and
botocore. A collector that is down or slow never slows a run: spans are exported from the
processor's thread, the queue is bounded (``OTEL_BSP_MAX_QUEUE_SIZE``, 2048) and a span that
does not fit, or a batch the collector refused, is dropped and counted in
``openrath_trace_spans_dropped_total{reason}``.

Before export every string attribute and event attribute passes the log redaction of
credential-like query parameters (a request URL's ``?token=``, a presigned URL's signature).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import (
    Decision,
    Sampler,
    SamplingResult,
    _get_from_env_or_default,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes
from prometheus_client import Counter

from openrath_project.jsonlog import redact_query_strings

logger = logging.getLogger(__name__)

SPANS_DROPPED = Counter(
    "openrath_trace_spans_dropped",
    "Spans not exported: the export queue was full, or the collector refused or did not "
    "answer a batch (reason: queue_full, export_failed).",
    ["reason"],
)

#: Work that runs every few seconds in every process, not started by anyone: not a trace of
#: its own (as part of a sampled trace, it is kept).
QUIET_ROOT_NAMES = ("runs_app.tasks.reconcile",)

_lock = threading.Lock()
_provider: TracerProvider | None = None


def exporting_configured(environ: dict[str, str] | None = None) -> bool:
    """Whether the standard OTel variables ask for traces to be exported."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if exporters in ("none", ""):
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


class QuietBackgroundSampler(Sampler):
    """The configured sampler (``OTEL_TRACES_SAMPLER``, default parent-based always-on), except
    that a client span with no parent (a worker's polling query, a broker round-trip, a
    channel-layer publish) and the periodic reconcile task start no trace."""

    def __init__(self, inner: Sampler) -> None:
        self.inner = inner

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if not parent.is_valid and (
            (kind == SpanKind.CLIENT and not name.startswith("chat "))
            or any(quiet in name for quiet in QUIET_ROOT_NAMES)
        ):
            return SamplingResult(Decision.DROP)
        return self.inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"QuietBackground{{{self.inner.get_description()}}}"


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact_query_strings(value)
    if isinstance(value, tuple | list):
        return tuple(redact_query_strings(v) if isinstance(v, str) else v for v in value)
    return value


def _redact_attributes(attributes: Attributes) -> dict[str, Any]:
    redacted = {}
    for key, value in (attributes or {}).items():
        if key.endswith("query") and isinstance(value, str):  # ``url.query``: no leading "?"
            redacted[key] = redact_query_strings(f"?{value}")[1:]
        else:
            redacted[key] = _redact_value(value)
    return redacted


def _needs_redaction(attributes: Attributes) -> bool:
    for value in (attributes or {}).values():
        if isinstance(value, str) and "=" in value:
            return True
        if isinstance(value, tuple | list) and any(isinstance(v, str) and "=" in v for v in value):
            return True
    return False


def redacted_span(span: ReadableSpan) -> ReadableSpan:
    """``span`` with its string attributes (its own and its events') redacted: a copy when
    one may hold a query string, else the span itself (most spans: no copy to make)."""
    if not _needs_redaction(span.attributes) and not any(
        _needs_redaction(e.attributes) for e in span.events
    ):
        return span
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_redact_attributes(span.attributes),
        events=[
            Event(e.name, _redact_attributes(e.attributes), timestamp=e.timestamp)
            for e in span.events
        ],
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class RedactingExporter(SpanExporter):
    """Redacts every span, then exports it with ``inner``; a failed batch is counted."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export([redacted_span(s) for s in spans])
        except Exception:  # an exporter must not kill the processor's thread
            logger.warning("trace export failed", exc_info=True)
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            SPANS_DROPPED.labels(reason="export_failed").inc(len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class BoundedBatchProcessor(BatchSpanProcessor):
    """The SDK's batch processor (bounded queue, export thread), counting what it drops."""

    def on_end(self, span: ReadableSpan) -> None:
        batch = getattr(self, "_batch_processor", None)
        queue = getattr(batch, "_queue", None)
        limit = getattr(batch, "_max_queue_size", None)
        if (
            span.context is not None
            and span.context.trace_flags.sampled
            and queue is not None
            and limit is not None
            and len(queue) >= limit
        ):
            SPANS_DROPPED.labels(reason="queue_full").inc()
        super().on_end(span)


def build_provider(
    exporter: SpanExporter,
    *,
    service: str = "openrath",
    process: str = "",
    sampler: Sampler | None = None,
) -> tuple[TracerProvider, SpanProcessor]:
    """A tracer provider exporting through the redaction and the bounded queue (not installed:
    :func:`configure_tracing` installs one; tests build their own)."""
    attributes: dict[str, Any] = {"service.name": os.environ.get("OTEL_SERVICE_NAME") or service}
    process = process or os.environ.get("OPENRATH_PROCESS", "")
    if process:
        attributes["openrath.process"] = process
    provider = TracerProvider(
        resource=Resource.create(attributes),
        sampler=sampler or QuietBackgroundSampler(_get_from_env_or_default()),
    )
    processor = BoundedBatchProcessor(RedactingExporter(exporter))
    provider.add_span_processor(processor)
    return provider, processor


def _otlp_exporter() -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # A bounded wait per batch (the standard variable wins): the export thread, not a run,
    # waits for a collector that does not answer.
    timeout = float(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or 0) or float(
        os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT") or 5
    )
    return OTLPSpanExporter(timeout=timeout)


def _instrument_libraries() -> None:
    """The maintained instrumentations (each one skipped, with a warning, if it fails)."""
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    instrumentors: list[Any] = [
        DjangoInstrumentor(),
        CeleryInstrumentor(),
        PsycopgInstrumentor(),
        RedisInstrumentor(),
        HTTPX2ClientInstrumentor(),
        BotocoreInstrumentor(),
    ]
    for instrumentor in instrumentors:
        if instrumentor.is_instrumented_by_opentelemetry:
            continue
        options: dict[str, Any] = {}
        if isinstance(instrumentor, DjangoInstrumentor):
            # Probes and scrapes are not traces (OTEL_PYTHON_DJANGO_EXCLUDED_URLS overrides).
            options["excluded_urls"] = os.environ.get(
                "OTEL_PYTHON_DJANGO_EXCLUDED_URLS", "healthz,readyz,metrics"
            )
        try:
            instrumentor.instrument(**options)
        except Exception:
            logger.warning("tracing: %s failed", type(instrumentor).__name__, exc_info=True)


def configure_tracing(process: str = "", *, service: str = "openrath") -> bool:
    """Install the SDK once in this process when exporting is configured; ``True`` when it is
    (now or before). ``process`` names the process in the resource (``openrath.process``).
    Safe to call from any thread, any number of times."""
    global _provider
    if _provider is not None:
        return True
    if not exporting_configured():
        return False
    with _lock:
        if _provider is not None:
            return True
        provider, _ = build_provider(_otlp_exporter(), service=service, process=process)
        trace.set_tracer_provider(provider)
        _provider = provider
        _instrument_libraries()
    logger.info("tracing: exporting spans over OTLP (service %s)", service)
    return True


def flush_tracing(timeout_millis: int = 5000) -> bool:
    """Export what is queued now (a process about to exit, a test); ``True`` when done."""
    return _provider.force_flush(timeout_millis) if _provider is not None else True
