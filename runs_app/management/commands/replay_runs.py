"""``manage.py replay_runs --workflow W``: replay finished runs against the current code (a
regression check after a prompt or code change); exit 1 with ``--fail-on-diff`` when any
replay differs from its original."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime

from openrath_project.errors import DomainError
from openrath_project.tenancy.management.cli import audit_cli, cli_actor, get_project, get_tenant
from openrath_project.tenancy.models import Project
from runs_app.models import Run
from runs_app.replay import REPLAYABLE_STATUSES, replay_run
from sessions_app.agents import REQUEST_PARTS


def _since(value: str) -> datetime:
    parsed = parse_datetime(value)
    if parsed is None or parsed.tzinfo is None:
        raise CommandError(f"--since must be an ISO 8601 instant with a zone; got {value!r}")
    return parsed


class Command(BaseCommand):
    help = (
        "Replay finished runs of a workflow against the current code, with every model call, "
        "tool result, decision and effect served from the runs' records. One line per run, "
        "then a summary; with --fail-on-diff, exit 1 when a replay differs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workflow", required=True, help="The workflow's registered name.")
        parser.add_argument("--tenant", help="The tenant's slug (required with a --project slug).")
        parser.add_argument("--project", help="A project's id, or its slug with --tenant.")
        parser.add_argument("--since", type=_since, help="Runs created at or after (ISO 8601).")
        parser.add_argument("--limit", type=int, default=100, help="At most N runs, newest first.")
        parser.add_argument("--fail-on-diff", action="store_true", help="Exit 1 on a difference.")

    def _runs(self, options: dict[str, Any]) -> QuerySet[Run]:
        # scope: an operator's command across the deployment, narrowed by the options
        runs = Run.objects.unscoped().filter(
            workflow=options["workflow"], kind="run", status__in=REPLAYABLE_STATUSES
        )
        if options.get("tenant"):
            tenant = get_tenant(options["tenant"])
            runs = runs.filter(tenant=tenant)
            if options.get("project"):
                runs = runs.filter(project=get_project(tenant, options["project"]))
        elif options.get("project"):
            project = None
            if _is_uuid(options["project"]):
                project = Project.objects.filter(id=options["project"]).first()
            if project is None:
                raise CommandError("--project is a project id, or a slug together with --tenant")
            runs = runs.filter(project=project)
        if options.get("since") is not None:
            runs = runs.filter(created_at__gte=options["since"])
        if options["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        return runs.select_related("project", "tenant").order_by("-id")[: options["limit"]]

    def handle(self, *args: Any, **options: Any) -> None:
        identical = different = skipped = 0
        actor = cli_actor()
        for run in self._runs(options):
            try:
                replay = replay_run(run=run, actor=actor)
            except DomainError as exc:
                skipped += 1
                self.stdout.write(f"{run.id}  skipped: {exc.message}")
                continue
            report = replay.output or {}
            audit_cli(
                action="run.replay",
                tenant=run.tenant,
                project=run.project,
                object_type="run",
                object_id=str(replay.id),
                details={"replay_of": str(run.id), "identical": bool(report.get("identical"))},
            )
            steps = report.get("steps_replayed", 0)
            if report.get("identical"):
                identical += 1
                self.stdout.write(f"{run.id}  identical  steps={steps}  replay={replay.id}")
                continue
            different += 1
            first = report.get("first_difference") or {}
            error = first.get("error") or {}
            why = f"  {error.get('type')}: {error.get('message')}" if error else ""
            changed = [
                part
                for part in REQUEST_PARTS
                if any(part in c.get("parts", []) for c in first.get("model_request") or [])
            ]
            if changed and not error:
                why = f"  model request changed: {', '.join(changed)}"
            self.stdout.write(
                f"{run.id}  DIFFERS at step {first.get('step')!r} "
                f"(checkpoint {first.get('checkpoint')})  steps={steps}  replay={replay.id}{why}"
            )
        total = identical + different + skipped
        self.stdout.write(
            f"replayed {total} run(s) of {options['workflow']}: {identical} identical, "
            f"{different} different, {skipped} skipped"
        )
        if different and options["fail_on_diff"]:
            raise CommandError(f"{different} replay(s) differ from their original", returncode=1)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
