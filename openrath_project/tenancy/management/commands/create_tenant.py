from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from openrath_project.tenancy import services
from openrath_project.tenancy.management.cli import audit_cli, call_service


class Command(BaseCommand):
    help = "Create a tenant. Prints its id on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = call_service(services.tenant_create, slug=options["slug"], name=options["name"])
        audit_cli(
            action="tenant.create", tenant=tenant, object_type="tenant", object_id=str(tenant.id)
        )
        self.stdout.write(f"created tenant {tenant.slug}")
        self.stdout.write(str(tenant.id))
