"""``GET /metrics``: the Prometheus text format, database gauges, process metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from effects_app.models import EffectRecord
from openrath_project import metrics, metrics_view
from runs_app import reconciler, registration, services
from runs_app.models import Interrupt, Run
from runs_app.registry import WorkflowRegistry
from runs_app.transitions import STATUSES
from tests.openrath_project import observability_workflows
from tests.runs_app.conftest import drive
from tests.support import REPO


def sample(name: str, **labels: str) -> float:
    """The current value of a sample of this process's registry (0 when not yet observed)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def scrape(client, **extra) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """GET /metrics, parsed: ``{sample name: {sorted label items: value}}``."""
    response = client.get("/metrics", **extra)
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    assert response["Content-Type"].startswith("text/plain; version=")
    parsed: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            parsed.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return parsed


@pytest.fixture
def observed_registry(monkeypatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([observability_workflows.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    return fresh


@pytest.mark.django_db
def test_metrics_parse_and_name_every_metric(client):
    parsed = scrape(client)
    for name in (
        "openrath_queue_depth",
        "openrath_effects_needing_review",
        "openrath_interrupts_pending",
        "openrath_metrics_database_ok",
    ):
        assert name in parsed, name
    assert set(parsed["openrath_runs"]) == {(("status", s),) for s in STATUSES}
    assert parsed["openrath_metrics_database_ok"] == {(): 1.0}
    families = {
        f.name for f in text_string_to_metric_families(client.get("/metrics").content.decode())
    }
    assert {
        "openrath_step_duration_seconds",
        "openrath_lease_expiries",
        "openrath_retries",
        "openrath_websocket_connections",
        "openrath_http_request_duration_seconds",
    } <= families


@pytest.mark.django_db
def test_database_gauges_reflect_the_rows(client, project, observed_registry):
    workflow = observed_registry.get("observed")
    runs = [services.run_create(project=project, workflow=workflow, state={})[0] for _ in range(6)]
    now = timezone.now()
    Run.objects.filter(id=runs[1].id).update(wake_at=now + timedelta(hours=1))  # a retry timer
    Run.objects.filter(id=runs[2].id).update(status="waiting")
    Run.objects.filter(id=runs[3].id).update(status="needs_review")
    Run.objects.filter(id=runs[4].id).update(status="succeeded")
    Run.objects.filter(id=runs[5].id).update(status="running", lease_expires_at=now)
    Interrupt.objects.create(
        tenant=project.tenant,
        project=project,
        run=runs[2],
        step="first",
        checkpoint_seq=0,
        sequence=1,
        kind="approval",
        request_digest="0" * 64,
    )
    Interrupt.objects.create(
        tenant=project.tenant,
        project=project,
        run=runs[2],
        step="first",
        checkpoint_seq=0,
        sequence=2,
        kind="approval",
        request_digest="1" * 64,
        status="resolved",
    )
    for index, status in enumerate(("needs_review", "succeeded")):
        EffectRecord.objects.create(
            tenant=project.tenant,
            project=project,
            run=runs[3],
            step="first",
            key=f"k{index}",
            idempotency_key=uuid.uuid4().hex,
            request_digest="2" * 64,
            status=status,
        )
    parsed = scrape(client)
    assert parsed["openrath_runs"] == {
        (("status", "queued"),): 2.0,
        (("status", "running"),): 1.0,
        (("status", "waiting"),): 1.0,
        (("status", "needs_review"),): 1.0,
        (("status", "succeeded"),): 1.0,
        (("status", "failed"),): 0.0,
        (("status", "cancelled"),): 0.0,
        (("status", "timed_out"),): 0.0,
    }
    assert parsed["openrath_queue_depth"] == {(): 1.0}  # the other queued run waits for a timer
    assert parsed["openrath_effects_needing_review"] == {(): 1.0}
    assert parsed["openrath_interrupts_pending"] == {(): 1.0}


@pytest.mark.django_db
def test_the_database_gauges_are_one_grouped_query_and_two_counts(
    client, django_assert_max_num_queries
):
    with django_assert_max_num_queries(3):
        metrics_view.database_gauges()


@pytest.mark.django_db
def test_a_database_failure_does_not_fail_the_scrape(client, monkeypatch):
    def broken() -> dict:
        raise RuntimeError("database away")

    monkeypatch.setattr(metrics_view, "database_gauges", broken)
    parsed = scrape(client)
    assert parsed["openrath_metrics_database_ok"] == {(): 0.0}
    assert "openrath_runs" not in parsed


@pytest.mark.django_db
def test_http_durations_are_observed_by_route_and_status_class(client, make_token):
    labels = {"method": "GET", "route": "healthz", "status_class": "2xx"}
    before = sample("openrath_http_request_duration_seconds_count", **labels)
    for _ in range(3):
        assert client.get("/healthz").status_code == 200
    assert sample("openrath_http_request_duration_seconds_count", **labels) == before + 3

    unmatched = {"method": "GET", "route": "unmatched", "status_class": "4xx"}
    before = sample("openrath_http_request_duration_seconds_count", **unmatched)
    assert client.get("/no/such/page/123").status_code == 404
    assert sample("openrath_http_request_duration_seconds_count", **unmatched) == before + 1

    listed = {"method": "GET", "route": "run-list", "status_class": "2xx"}
    denied = {"method": "GET", "route": "run-list", "status_class": "4xx"}
    before_listed = sample("openrath_http_request_duration_seconds_count", **listed)
    before_denied = sample("openrath_http_request_duration_seconds_count", **denied)
    token = make_token(["runs:read"])
    assert client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
    assert client.get("/api/v1/runs/").status_code == 401
    assert sample("openrath_http_request_duration_seconds_count", **listed) == before_listed + 1
    assert sample("openrath_http_request_duration_seconds_count", **denied) == before_denied + 1
    # scraped values are the same numbers
    parsed = scrape(client)
    key = tuple(sorted(listed.items()))
    assert parsed["openrath_http_request_duration_seconds_count"][key] == before_listed + 1


@pytest.mark.django_db(transaction=True)
def test_step_durations_and_retries_are_observed(observed_registry, project):
    completed = {"workflow": "observed", "outcome": "completed"}
    failed = {"workflow": "observed", "outcome": "failed"}
    before = (
        sample("openrath_step_duration_seconds_count", **completed),
        sample("openrath_step_duration_seconds_count", **failed),
        sample("openrath_retries_total", workflow="observed"),
    )
    run, _ = services.run_create(
        project=project, workflow=observed_registry.get("observed"), state={}
    )
    done = drive(observed_registry, run.id)
    assert done.status == "succeeded"
    assert done.output == {"first": True, "flaky_attempt": 2}
    assert sample("openrath_step_duration_seconds_count", **completed) == before[0] + 2
    assert sample("openrath_step_duration_seconds_count", **failed) == before[1] + 1
    assert sample("openrath_retries_total", workflow="observed") == before[2] + 1
    assert sample("openrath_step_duration_seconds_sum", **completed) > 0


@pytest.mark.django_db(transaction=True)
def test_lease_expiries_are_counted(observed_registry, project):
    run, _ = services.run_create(
        project=project, workflow=observed_registry.get("observed"), state={}
    )
    claim = services.lease_claim(worker="doomed-worker", run_id=run.id)
    assert claim is not None
    Run.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    before = sample("openrath_lease_expiries_total", action="requeued")
    result = reconciler.reconcile()
    assert result.expired_leases == 1
    assert sample("openrath_lease_expiries_total", action="requeued") == before + 1
    assert Run.objects.get(id=run.id).status == "queued"


def test_websocket_helpers_move_the_gauge():
    before = sample("openrath_websocket_connections", stream="sessions")
    other = sample("openrath_websocket_connections", stream="other")
    metrics.ws_connected("sessions")
    metrics.ws_connected("sessions")
    metrics.ws_disconnected("sessions")
    metrics.ws_connected("something-unbounded")
    assert sample("openrath_websocket_connections", stream="sessions") == before + 1
    assert sample("openrath_websocket_connections", stream="other") == other + 1
    metrics.ws_disconnected("sessions")
    metrics.ws_disconnected("something-unbounded")
    assert sample("openrath_websocket_connections", stream="sessions") == before
    assert sample("openrath_websocket_connections", stream="other") == other


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("cidrs", "remote", "status"),
    [
        ([], "203.0.113.9", 200),
        (["10.0.0.0/8"], "127.0.0.1", 403),
        (["10.0.0.0/8"], "10.1.2.3", 200),
        (["10.0.0.0/8", "127.0.0.1"], "127.0.0.1", 200),
        (["fd00::/8"], "fd00::1", 200),
        (["10.0.0.0/8"], "::ffff:10.9.9.9", 200),
        (["10.0.0.0/8"], "not-an-address", 403),
    ],
)
def test_metrics_can_be_restricted_by_network(client, settings, cidrs, remote, status):
    settings.OPENRATH_METRICS_ALLOWED_CIDRS = cidrs
    response = client.get("/metrics", REMOTE_ADDR=remote)
    assert response.status_code == status
    if status == 403:
        assert response.json()["error"]["code"] == "permission_denied"
        # the forwarded header is never believed
        again = client.get("/metrics", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR="10.1.1.1")
        assert again.status_code == 403


def test_a_bad_cidr_refuses_to_start():
    from tests.support import run_manage

    result = run_manage("check", env={"OPENRATH_METRICS_ALLOWED_CIDRS": "10.0.0.0/8,bogus"})
    assert result.returncode == 1
    assert "OPENRATH_METRICS_ALLOWED_CIDRS: 'bogus' is not a network in CIDR notation" in (
        result.stderr
    )


PRODUCTION_PROBE = textwrap.dedent(
    """
    import django, json
    django.setup()
    from django.test import Client
    client = Client()
    metrics = client.get("/metrics")
    api = client.get("/api/v1/projects/")
    print(json.dumps({
        "metrics": metrics.status_code,
        "database_ok": "openrath_metrics_database_ok 0.0" in metrics.content.decode(),
        "api": api.status_code,
        "location": api.get("Location"),
    }))
    """
)


def test_metrics_is_served_over_plain_http_in_production(tmp_path):
    """The production profile redirects HTTP to HTTPS, except the probes and /metrics (and a
    scrape still answers while the database is down)."""
    env = {
        "OPENRATH_PROFILE": "production",
        "OPENRATH_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "PYTHONPATH": str(REPO),
        "DATABASE_URL": "postgres://openrath@127.0.0.1:1/openrath",
        "REDIS_URL": "redis://127.0.0.1:1/0",
        "SECRET_KEY": "k3y-" + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP",
        "ALLOWED_HOSTS": "testserver",
        "S3_BUCKET": "artifacts",
        "S3_ACCESS_KEY_ID": "id",
        "S3_SECRET_ACCESS_KEY": "secret",
        "S3_ENDPOINT_URL": "http://127.0.0.1:1",
        "DATABASE_CONNECT_TIMEOUT": "1",
        "OPENRATH_LOG_FORMAT": "text",
    }
    result = subprocess.run(
        [sys.executable, "-c", PRODUCTION_PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    probe = json.loads(result.stdout.strip().splitlines()[-1])
    assert probe == {
        "metrics": 200,
        "database_ok": True,
        "api": 301,
        "location": "https://testserver/api/v1/projects/",
    }


MULTIPROCESS_CHILD = textwrap.dedent(
    """
    import sys
    from openrath_project import metrics
    with metrics.observe_step("multi"):
        pass
    metrics.retry_scheduled(workflow="multi")
    metrics.ws_connected("runs")
    if sys.argv[1] == "render":
        from prometheus_client import generate_latest
        sys.stdout.write(generate_latest(metrics.process_registry()).decode())
    """
)


def test_multiprocess_mode_sums_every_process(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR, any process reports the machine's processes together;
    a process that exited no longer counts in the live gauge."""
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    for _ in range(2):
        subprocess.run(
            [sys.executable, "-c", MULTIPROCESS_CHILD, "observe"], env=env, check=True, timeout=60
        )
    rendered = subprocess.run(
        [sys.executable, "-c", MULTIPROCESS_CHILD, "render"],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout
    values = {
        (s.name, json.dumps(s.labels, sort_keys=True)): s.value
        for family in text_string_to_metric_families(rendered)
        for s in family.samples
    }
    completed = json.dumps({"outcome": "completed", "workflow": "multi"}, sort_keys=True)
    assert values[("openrath_step_duration_seconds_count", completed)] == 3.0
    assert values[("openrath_retries_total", json.dumps({"workflow": "multi"}))] == 3.0
    # the two exited processes were marked dead; only the rendering one is still connected
    assert values[("openrath_websocket_connections", json.dumps({"stream": "runs"}))] == 1.0
