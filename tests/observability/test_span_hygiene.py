"""What reaches a collector: redacted attributes, log lines that name their span, the content
switch per project, the quiet background sampler. On a tracer provider of the test's own (the
process keeps the API's no-op provider)."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision
from opentelemetry.trace import SpanKind

from openrath_project import tracing
from openrath_project.jsonlog import ContextFilter, JsonFormatter
from openrath_project.tracing_setup import QuietBackgroundSampler, RedactingExporter
from runs_app.tracing import content_allowed


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RedactingExporter(memory)))
    return provider, memory


def test_credentials_in_query_strings_never_reach_the_exporter():
    provider, memory = _provider()
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(
        "GET",
        attributes={
            "http.url": "https://host/api/v1/stream?token=abc123&limit=5",
            "url.query": "X-Amz-Signature=deadbeef&part=2",
            "http.status_code": 200,
            "tags": ["plain", "https://x/?api_key=zzz"],
        },
    ) as span:
        span.add_event("redirect", {"location": "/next?password=hunter2"})
    (exported,) = memory.get_finished_spans()
    assert dict(exported.attributes or {}) == {
        "http.url": "https://host/api/v1/stream?token=[redacted]&limit=5",
        "url.query": "X-Amz-Signature=[redacted]&part=2",
        "http.status_code": 200,
        "tags": ("plain", "https://x/?api_key=[redacted]"),
    }
    assert dict(exported.events[0].attributes or {}) == {"location": "/next?password=[redacted]"}
    assert exported.context == span.get_span_context()


def test_json_log_lines_carry_the_current_trace_and_span_ids():
    provider, _ = _provider()
    tracer = provider.get_tracer("test")
    formatter, context_filter = JsonFormatter(), ContextFilter()

    def line(message: str) -> dict:
        record = logging.LogRecord("openrath.test", logging.INFO, __file__, 1, message, (), None)
        context_filter.filter(record)
        return json.loads(formatter.format(record))

    with tracer.start_as_current_span("step") as span:
        inside = line("inside")
    outside = line("outside")
    ids = span.get_span_context()
    assert (inside["trace_id"], inside["span_id"]) == (
        format(ids.trace_id, "032x"),
        format(ids.span_id, "016x"),
    )
    assert "trace_id" not in outside
    assert "span_id" not in outside


def test_a_carrier_round_trips_the_span_context():
    provider, _ = _provider()
    with provider.get_tracer("test").start_as_current_span("run") as span:
        carrier = tracing.carrier_of()
    assert set(carrier) == {"traceparent"}
    restored = trace.get_current_span(tracing.context_from(carrier)).get_span_context()
    assert (restored.trace_id, restored.span_id) == (
        span.get_span_context().trace_id,
        span.get_span_context().span_id,
    )
    assert tracing.context_from({}) is None
    assert tracing.context_from({"traceparent": "not-a-traceparent"}) is None
    assert tracing.link_to({}) == []


def test_the_content_switch_is_per_project(settings):
    settings.OPENRATH_TRACE_CONTENT_PROJECTS = ("acme/research",)
    assert content_allowed("acme", "research") is True
    assert content_allowed("acme", "ops") is False
    assert content_allowed("globex", "research") is False
    settings.OPENRATH_TRACE_CONTENT_PROJECTS = ("*",)
    assert content_allowed("globex", "anything") is True
    settings.OPENRATH_TRACE_CONTENT_PROJECTS = ()
    assert content_allowed("acme", "research") is False
    assert tracing.content_recording() is False
    with tracing.recording_content(True):
        assert tracing.content_recording() is True
    assert tracing.content_recording() is False


@pytest.mark.parametrize(
    ("name", "kind", "parented", "decision"),
    [
        ("SELECT", SpanKind.CLIENT, False, Decision.DROP),  # a worker's polling query
        ("SELECT", SpanKind.CLIENT, True, Decision.RECORD_AND_SAMPLE),  # inside a step
        ("chat gpt-4o", SpanKind.CLIENT, False, Decision.RECORD_AND_SAMPLE),  # a script's call
        ("run/runs_app.tasks.reconcile", SpanKind.CONSUMER, False, Decision.DROP),
        ("POST api/v1/runs/$", SpanKind.SERVER, False, Decision.RECORD_AND_SAMPLE),
    ],
)
def test_background_work_starts_no_trace(name, kind, parented, decision):
    sampler = QuietBackgroundSampler(ALWAYS_ON)
    parent = None
    if parented:
        provider, _ = _provider()
        with provider.get_tracer("test").start_as_current_span("step") as span:
            parent = trace.set_span_in_context(span)
    result = sampler.should_sample(parent, 1, name, kind)
    assert result.decision == decision


@pytest.mark.django_db
def test_step_durations_carry_the_step_span_as_an_exemplar_in_openmetrics(client):
    from openrath_project.metrics import observe_step

    provider, _ = _provider()
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("openrath.step s1") as span, observe_step("exemplary"):
        pass
    ids = span.get_span_context()
    response = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response["Content-Type"].startswith("application/openmetrics-text")
    exemplar = f'# {{span_id="{ids.span_id:016x}",trace_id="{ids.trace_id:032x}"}}'
    lines = [
        line
        for line in response.content.decode().splitlines()
        if line.startswith("openrath_step_duration_seconds_bucket")
        and 'workflow="exemplary"' in line
    ]
    assert sum(exemplar in line for line in lines) == 1
    plain = client.get("/metrics").content.decode()  # the classic text format: no exemplars
    assert "exemplary" in plain
    assert f"{ids.trace_id:032x}" not in plain
