"""Fixtures for schedule tests: a registry holding the test workflow, and schedule makers."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from runs_app import registration
from runs_app.registry import WorkflowRegistry
from schedules_app import services
from schedules_app.models import Schedule
from tests.schedules_app import workflows

#: A fixed clock for the firing tests: every ``now`` is given explicitly.
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([workflows.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    return fresh


MakeSchedule = Callable[..., Schedule]


@pytest.fixture
def make_schedule(project: Any, registry: WorkflowRegistry) -> MakeSchedule:
    """``make_schedule(**fields)``: a minutely cron schedule of sched-tally created at T0."""

    def make(**fields: Any) -> Schedule:
        values: dict[str, Any] = {
            "project": project,
            "workflow": "sched-tally",
            "kind": "cron",
            "cron": "* * * * *",
            "input": {"n": 1},
            "created_by": "test",
            "now": T0,
        }
        values.update(fields)
        return services.schedule_create(**values)

    return make
