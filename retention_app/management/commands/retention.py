"""``manage.py retention [--dry-run] [--tenant T] [--project P]``: apply the retention policies
(all enabled ones, or one project's) until done, or with ``--dry-run`` report what they would
remove. One JSON line per project, then a summary line."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet

from openrath_project.errors import DomainError
from openrath_project.tenancy.management.cli import cli_actor, get_project, get_tenant
from retention_app import services
from retention_app.models import RetentionPolicy

#: Passes one project may take before the command gives up (each removes at least a batch).
MAX_PASSES = 10_000


class Command(BaseCommand):
    help = (
        "Apply retention policies now (all enabled ones, or one project's with --project), "
        "batch after batch until nothing the limits expire is left; --dry-run only reports "
        "what would go, with counts and bytes. One JSON line per project, then a summary."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Report; change nothing.")
        parser.add_argument("--tenant", help="The tenant's slug (required with --project).")
        parser.add_argument("--project", help="A project's slug (with --tenant).")

    def _policies(self, options: dict[str, Any]) -> QuerySet[RetentionPolicy]:
        # scope: an operator's command across the deployment, narrowed by the options
        policies = RetentionPolicy.objects.unscoped().select_related("project__tenant")
        if options.get("project") and not options.get("tenant"):
            raise CommandError("--project needs --tenant (a project's slug is per tenant)")
        if options.get("tenant"):
            tenant = get_tenant(options["tenant"])
            policies = policies.filter(tenant=tenant)
            if options.get("project"):
                project = get_project(tenant, options["project"])
                policies = policies.filter(project=project)
                if not policies.exists():
                    raise CommandError(f"project {project.slug} has no retention policy")
                return policies
        return policies.filter(enabled=True).order_by("created_at")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = cli_actor()
        totals: dict[str, int] = {}
        projects = 0
        for policy in self._policies(options):
            projects += 1
            try:
                report = (
                    services.retention_dry_run(policy=policy)
                    if options["dry_run"]
                    else self._apply(policy, actor)
                )
            except DomainError as exc:
                raise CommandError(f"{policy.project.slug}: {exc.message}") from exc
            body = report.as_dict()
            body["project_slug"] = policy.project.slug
            self.stdout.write(json.dumps(body, sort_keys=True))
            for kind, measured in report.removed.items():
                totals[kind] = totals.get(kind, 0) + measured["count"]
        verb = "would remove" if options["dry_run"] else "removed"
        parts = ", ".join(f"{n} {kind}" for kind, n in sorted(totals.items()) if n) or "nothing"
        self.stdout.write(f"retention over {projects} project(s): {verb} {parts}")

    def _apply(self, policy: RetentionPolicy, actor: str) -> services.Report:
        merged = services.Report(project=str(policy.project_id), dry_run=False)
        for _ in range(MAX_PASSES):
            policy.refresh_from_db()
            report = services.retention_apply(
                policy=policy, trigger="command", actor=actor, budget_seconds=60.0
            )
            for kind, measured in report.removed.items():
                slot = merged.removed.setdefault(kind, {"count": 0, "bytes": 0})
                slot["count"] += measured["count"]
                slot["bytes"] += measured["bytes"]
            merged.compacted += report.compacted
            merged.protected = report.protected
            merged.failures += report.failures
            if report.complete or report.failures:
                merged.complete = report.complete
                return merged
        merged.complete = False
        return merged
