"""Fixtures for durable-run tests: a registry of the test workflows and a driver."""

from __future__ import annotations

import time
import uuid

import pytest

from runs_app import registration
from runs_app.executor import run_one
from runs_app.models import Run
from runs_app.registry import WorkflowRegistry
from tests.runs_app.workflows import durable, openrath_style


@pytest.fixture
def registry(monkeypatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([durable.__name__, openrath_style.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    durable.CALLS.clear()
    return fresh


def drive(
    registry: WorkflowRegistry,
    run_id: uuid.UUID,
    *,
    timeout: float = 120,
    until=("succeeded", "failed", "cancelled", "timed_out", "needs_review", "waiting"),
    worker: str = "test-worker",
) -> Run:
    """Execute the run (and its branches) on this thread until it reaches one of ``until``
    (a parent waiting for its branches keeps being driven). ``timeout`` only bounds a run that
    never settles: generous, so a loaded machine never fails a test that would pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(id=run_id)
        waiting_for_branches = run.status == "waiting" and bool(run.fanout)
        if run.status in until and not waiting_for_branches:
            return run
        if run_one(worker, registry=registry) is None:
            time.sleep(0.02)
    raise AssertionError(f"run {run_id} did not finish: {Run.objects.get(id=run_id).status}")
