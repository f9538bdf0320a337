"""Observability drills: a database-claiming worker process serves its own metrics port."""

from __future__ import annotations

import signal
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runs_app import registry as registry_module
from runs_app import services
from runs_app.models import Run
from tests.drills import workflows
from tests.drills.conftest import wait_for
from tests.s3 import free_ports

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:  # noqa: S310
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_run_worker_serves_step_metrics_on_its_port(processes, project, tmp_path):
    fresh = registry_module.WorkflowRegistry()
    fresh.discover([workflows.__name__])
    log = tmp_path / "steps.log"
    run, _ = services.run_create(
        project=project, workflow=fresh.get("drill_steps"), state={"log": str(log)}
    )
    (port,) = free_ports(1)
    worker = processes.start(
        [
            sys.executable,
            "manage.py",
            "run_worker",
            "--poll",
            "0.2",
            "--name",
            "metered",
            "--metrics-port",
            str(port),
            "--metrics-addr",
            "127.0.0.1",
        ],
        name="metered",
    )
    # Generous waits: they only bound a failing drill (a loaded machine starts processes slowly).
    wait_for(lambda: Run.objects.get(id=run.id).status == "succeeded", timeout=180, what="the run")
    samples = wait_for(lambda: _scrape(port), timeout=60, what="the metrics port")
    assert isinstance(samples, dict)
    key = (
        "openrath_step_duration_seconds_count",
        (("outcome", "completed"), ("workflow", "drill_steps")),
    )
    assert samples[key] == 5.0
    assert ("process_resident_memory_bytes", ()) in samples  # this process's own collectors
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=120) == 0
