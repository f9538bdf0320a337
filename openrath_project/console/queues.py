"""Console page of the run queue: each project's running and queued runs against the running
limits of its tenant and its own (``max_running_runs``, set by operators in the admin or with
``manage.py queue_limits``), and when the fair claim last served it.

Read-only, a thin caller of the scoped selectors like the other console pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from openrath_project.console.access import Console, console_page
from openrath_project.console.views import _base
from openrath_project.tenancy.models import Project
from openrath_project.tenancy.selectors import project_list
from runs_app import selectors as run_selectors


@dataclass
class QueueRow:
    project: Project
    running: int
    queued: int

    @property
    def at_limit(self) -> bool:
        limit = self.project.max_running_runs
        return limit is not None and self.running >= limit

    @property
    def last_claimed_at(self) -> datetime | None:
        return self.project.last_claimed_at


@require_GET
@console_page()
def queues(request: HttpRequest, console: Console) -> HttpResponse:
    principal = console.principal
    projects = project_list(principal=principal).order_by("slug")
    if console.project is not None:
        projects = projects.filter(id=console.project.id)
    counts: dict[Any, tuple[int, int]] = {
        row["project_id"]: (row["running"], row["queued"])
        for row in run_selectors.run_list(principal=principal)
        .filter(status__in=("running", "queued"))
        .order_by()
        .values("project_id")
        .annotate(
            running=Count("id", filter=Q(status="running")),
            queued=Count("id", filter=Q(status="queued")),
        )
    }
    rows = [
        QueueRow(
            project=project,
            running=counts.get(project.id, (0, 0))[0],
            queued=counts.get(project.id, (0, 0))[1],
        )
        for project in projects
    ]
    tenant = principal.tenant
    tenant_running = (
        run_selectors.run_list(principal=principal).filter(status="running").count()
        if principal.project_ids is None
        else None  # a project-restricted principal does not see the tenant's other runs
    )
    return render(
        request,
        "console/queues.html",
        _base(
            console,
            rows=rows,
            tenant=tenant,
            tenant_running=tenant_running,
            tenant_at_limit=(
                tenant.max_running_runs is not None
                and tenant_running is not None
                and tenant_running >= tenant.max_running_runs
            ),
        ),
    )
