from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from openrath_project.tenancy import services
from openrath_project.tenancy.management.cli import audit_cli, call_service, get_tenant


class Command(BaseCommand):
    help = "Create a project in a tenant. Prints its id on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant")
        parser.add_argument("slug")
        parser.add_argument("--name", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = get_tenant(options["tenant"])
        project = call_service(
            services.project_create, tenant=tenant, slug=options["slug"], name=options["name"]
        )
        audit_cli(
            action="project.create",
            tenant=tenant,
            project=project,
            object_type="project",
            object_id=str(project.id),
        )
        self.stdout.write(f"created project {tenant.slug}/{project.slug}")
        self.stdout.write(str(project.id))
