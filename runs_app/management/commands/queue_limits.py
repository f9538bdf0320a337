"""``manage.py queue_limits``: show, set or clear the running limits of a tenant and its
projects (``max_running_runs``: at most that many of their runs execute at once; the fair
claim skips a tenant or project at its limit; docs/operations.md, "Fair queues and limits").

    manage.py queue_limits show <tenant>
    manage.py queue_limits set <tenant> <limit> [--project <slug>]
    manage.py queue_limits clear <tenant> [--project <slug>]

``set`` and ``clear`` are audited (``tenant.queue_limit`` / ``project.queue_limit``, with the
limit before and after). The last line of stdout is the result: the limit now (``none``), or
for ``show`` the number of projects.

It lives in runs_app, not with the tenancy commands: it counts runs (``show``) and calls the
claim's service (``runs_app.services.leases.queue_limit_set``), and tenancy is below runs_app.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db.models import Count, Q

from openrath_project.tenancy.management.cli import (
    audit_cli,
    call_service,
    get_project,
    get_tenant,
)
from openrath_project.tenancy.models import Project, Tenant
from runs_app.models import Run
from runs_app.services.leases import queue_limit_set


def _shown(limit: int | None) -> str:
    return "none" if limit is None else str(limit)


class Command(BaseCommand):
    help = (
        "Show, set or clear the running limit (max_running_runs) of a tenant or one of its "
        "projects. Prints the limit now on the last line (show: the number of projects)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        show = actions.add_parser("show", help="the limits, running and queued runs")
        show.add_argument("tenant")
        set_ = actions.add_parser("set", help="set a limit (0 pauses)")
        set_.add_argument("tenant")
        set_.add_argument("limit", type=int)
        set_.add_argument("--project", default=None, help="a project's slug: its own limit")
        clear = actions.add_parser("clear", help="remove a limit")
        clear.add_argument("tenant")
        clear.add_argument("--project", default=None, help="a project's slug: its own limit")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = get_tenant(options["tenant"])
        if options["action"] == "show":
            self._show(tenant)
            return
        project = get_project(tenant, options["project"]) if options["project"] else None
        limit = options["limit"] if options["action"] == "set" else None
        change = call_service(queue_limit_set, tenant=tenant, project=project, limit=limit)
        audit_cli(
            action="project.queue_limit" if project is not None else "tenant.queue_limit",
            tenant=tenant,
            project=project,
            object_type="project" if project is not None else "tenant",
            object_id=str(project.id if project is not None else tenant.id),
            details={"max_running_runs": {"before": change.before, "after": change.after}},
        )
        where = f"{tenant.slug}/{project.slug}" if project is not None else tenant.slug
        self.stdout.write(f"{where}: max_running_runs {_shown(change.before)} -> ", ending="")
        self.stdout.write(_shown(change.after))

    def _show(self, tenant: Tenant) -> None:
        counts: dict[Any, tuple[int, int]] = {
            row["project_id"]: (row["running"], row["queued"])
            for row in Run.objects.filter(tenant=tenant, status__in=("running", "queued"))
            .order_by()
            .values("project_id")
            .annotate(
                running=Count("id", filter=Q(status="running")),
                queued=Count("id", filter=Q(status="queued")),
            )
        }
        running = sum(running for running, _ in counts.values())
        queued = sum(queued for _, queued in counts.values())
        self.stdout.write(
            f"tenant {tenant.slug}\tmax_running_runs={_shown(tenant.max_running_runs)}\t"
            f"running={running}\tqueued={queued}\tlast_claimed_at={tenant.last_claimed_at or '-'}"
        )
        projects = list(Project.objects.unscoped().filter(tenant=tenant).order_by("slug"))
        for project in projects:
            project_running, project_queued = counts.get(project.id, (0, 0))
            self.stdout.write(
                f"project {project.slug}\tmax_running_runs={_shown(project.max_running_runs)}\t"
                f"running={project_running}\tqueued={project_queued}\t"
                f"last_claimed_at={project.last_claimed_at or '-'}"
            )
        self.stdout.write(f"{len(projects)} project(s)")
