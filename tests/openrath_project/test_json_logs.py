"""JSON log lines carry their context: request id and tenant in the API, run and step in the
executor (captured through the real formatter and filter)."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from openrath_project.jsonlog import ContextFilter, JsonFormatter
from runs_app import registration, services
from runs_app.api.views import RunViewSet
from runs_app.registry import WorkflowRegistry
from tests.openrath_project import observability_workflows
from tests.runs_app.conftest import drive

Lines = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def json_lines() -> Iterator[Lines]:
    """Every log record from here on, as the JSON line production writes."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)


@pytest.mark.django_db
def test_api_log_lines_carry_request_id_and_tenant(
    client, make_token, tenant, json_lines, monkeypatch
):
    listing = RunViewSet.list

    def logged_list(self: RunViewSet, request: Any, *args: Any, **kwargs: Any) -> Any:
        logging.getLogger("openrath.test.api").info("listing runs")
        return listing(self, request, *args, **kwargs)

    monkeypatch.setattr(RunViewSet, "list", logged_list)
    token = make_token(["runs:read"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    listed = client.get("/api/v1/runs/", HTTP_X_REQUEST_ID="req-list-1", **auth)
    missing = client.get(f"/api/v1/runs/{uuid.uuid4()}/", HTTP_X_REQUEST_ID="req-missing-1", **auth)
    assert (listed.status_code, missing.status_code) == (200, 404)

    lines = json_lines()
    in_view = [line for line in lines if line["message"] == "listing runs"]
    assert len(in_view) == 1
    assert in_view[0]["request_id"] == "req-list-1"
    assert in_view[0]["tenant"] == str(tenant.id)
    assert in_view[0]["level"] == "INFO"
    assert in_view[0]["logger"] == "openrath.test.api"
    # Django logs the 404 after the middleware is done; the line still names both.
    not_found = [line for line in lines if line["logger"] == "django.request"]
    assert len(not_found) == 1
    assert not_found[0]["message"].startswith("Not Found: /api/v1/runs/")
    assert not_found[0]["request_id"] == "req-missing-1"
    assert not_found[0]["tenant"] == str(tenant.id)
    # Nothing leaks into the next request's context.
    client.get("/healthz")
    assert logging.getLogger().handlers  # still configured
    from openrath_project.jsonlog import current_context

    assert current_context() == {}


@pytest.mark.django_db
def test_anonymous_api_log_lines_name_no_tenant(client, json_lines):
    assert client.get("/api/v1/runs/", HTTP_X_REQUEST_ID="req-anon-1").status_code == 401
    denied = [line for line in json_lines() if line["logger"] == "django.request"]
    assert len(denied) == 1
    assert denied[0]["request_id"] == "req-anon-1"
    assert "tenant" not in denied[0]


@pytest.mark.django_db(transaction=True)
def test_executor_log_lines_carry_run_and_step(project, json_lines, monkeypatch):
    registry = WorkflowRegistry()
    registry.discover([observability_workflows.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: registry)
    run, _ = services.run_create(project=project, workflow=registry.get("observed"), state={})
    done = drive(registry, run.id, worker="log-test-worker")
    assert done.status == "succeeded"

    lines = json_lines()
    working = [line for line in lines if line["message"] == "working on nothing"]
    assert len(working) == 1
    assert working[0]["logger"] == "openrath.run.first"
    assert working[0]["run"] == str(run.id)
    assert working[0]["step"] == "first"
    assert working[0]["tenant"] == str(project.tenant_id)
    assert working[0]["worker"] == "log-test-worker"
    failed = [line for line in lines if line["message"].startswith("step flaky attempt 1 failed")]
    assert len(failed) == 1
    assert failed[0]["level"] == "WARNING"
    assert failed[0]["run"] == str(run.id)
    assert failed[0]["step"] == "flaky"
    assert failed[0]["message"] == "step flaky attempt 1 failed: flaked once"
