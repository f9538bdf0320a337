"""Tracing switched off (the default), and a collector that is down or never answers: runs are
neither slowed nor failed, and what could not be exported is dropped and counted."""

from __future__ import annotations

import signal
import socket
import sys
import threading
import urllib.request

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from openrath_project import tracing
from openrath_project.tracing_setup import (
    BoundedBatchProcessor,
    build_provider,
    configure_tracing,
    exporting_configured,
)
from runs_app import registry as registry_module
from runs_app import services
from runs_app.models import Run
from tests.drills import workflows
from tests.drills.conftest import wait_for
from tests.runs_app.conftest import drive
from tests.s3 import closed_port, free_ports


def dropped(reason: str) -> float:
    return REGISTRY.get_sample_value("openrath_trace_spans_dropped_total", {"reason": reason}) or 0


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
    ],
)
def test_exporting_is_on_only_when_an_endpoint_is_set(environ, expected):
    assert exporting_configured(environ) is expected


@pytest.mark.django_db(transaction=True)
def test_with_exporting_off_nothing_is_installed_and_runs_carry_no_trace(
    monkeypatch, project, tmp_path
):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert configure_tracing("test") is False
    fresh = registry_module.WorkflowRegistry()
    fresh.discover([workflows.__name__])
    run, _ = services.run_create(
        project=project, workflow=fresh.get("drill_steps"), state={"log": str(tmp_path / "log")}
    )
    assert run.trace_context == {}
    done = drive(fresh, run.id)
    assert done.status == "succeeded"
    assert Run.objects.get(id=run.id).trace_context == {}
    # The API's no-op provider is still the process's: no SDK, no span recorded anywhere.
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    assert tracing.carrier_of() == {}


def _emit(provider: TracerProvider, count: int) -> None:
    tracer = provider.get_tracer("test")
    for index in range(count):
        with tracer.start_as_current_span(f"span {index}"):
            pass


def test_a_collector_that_refuses_connections_drops_and_counts_the_batches():
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{closed_port()}/v1/traces", timeout=1)
    provider, _ = build_provider(exporter)
    before = dropped("export_failed")
    _emit(provider, 20)
    provider.force_flush(30_000)
    provider.shutdown()
    assert dropped("export_failed") - before == 20


def test_a_collector_that_never_answers_does_not_hold_up_span_producers():
    # A listening socket that never accepts: connections hang until the exporter's timeout.
    hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hole.bind(("127.0.0.1", 0))
    hole.listen(1024)
    try:
        exporter = OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{hole.getsockname()[1]}/v1/traces", timeout=2
        )
        provider, processor = build_provider(exporter)
        assert isinstance(processor, BoundedBatchProcessor)
        queue_limit = processor._batch_processor._max_queue_size
        full_before = dropped("queue_full")
        produced = threading.Event()

        def produce() -> None:
            _emit(provider, queue_limit + 10_000)
            produced.set()

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        # Each export waits 2 s for an answer that never comes: 12 000 spans would take hours
        # if a producer waited for an export. Generous bounds: a loaded machine is slow.
        assert produced.wait(timeout=120), "span producers were held up by the collector"
        # What did not fit in the queue (or in the few batches taken out meanwhile) is counted.
        assert dropped("queue_full") - full_before >= 5000
    finally:
        hole.close()
    provider.shutdown()


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:  # noqa: S310
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.postgres
@pytest.mark.slow
def test_a_worker_exporting_to_a_collector_that_is_down_finishes_its_runs(
    processes, project, tmp_path
):
    fresh = registry_module.WorkflowRegistry()
    fresh.discover([workflows.__name__])
    runs = [
        services.run_create(
            project=project,
            workflow=fresh.get("drill_steps"),
            state={"log": str(tmp_path / f"steps-{index}.log")},
        )[0]
        for index in range(3)
    ]
    (port,) = free_ports(1)
    worker = processes.start(
        [
            sys.executable,
            "manage.py",
            "run_worker",
            "--poll",
            "0.2",
            "--name",
            "traced",
            "--metrics-port",
            str(port),
            "--metrics-addr",
            "127.0.0.1",
        ],
        name="traced",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    wait_for(
        lambda: all(Run.objects.get(id=r.id).status == "succeeded" for r in runs),
        timeout=180,
        what="the runs",
    )
    key = ("openrath_trace_spans_dropped_total", (("reason", "export_failed"),))

    def counted() -> bool:
        return _scrape(port).get(key, 0) >= 15  # 5 steps per run, each with its span

    wait_for(counted, timeout=120, what="the dropped spans counted", every=0.5)
    for run in runs:  # each claim's steps had a trace (the runs were created untraced)
        assert Run.objects.get(id=run.id).trace_context == {}
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=120) == 0
