from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from openrath_project.tenancy import services
from openrath_project.tenancy.grants import GRANTS
from openrath_project.tenancy.management.cli import (
    audit_cli,
    call_service,
    get_project,
    get_tenant,
)


class Command(BaseCommand):
    help = (
        "Mint an API token for a tenant. The token is printed once, alone on the last line; "
        f"only its hash is stored. Grants: {', '.join(GRANTS)} (or '*')."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant")
        parser.add_argument("--grants", required=True, help="comma-separated grant names")
        parser.add_argument(
            "--project",
            action="append",
            default=[],
            help="limit the token to this project (repeatable)",
        )
        parser.add_argument("--name", default="")
        parser.add_argument("--expires-in", type=int, default=None, metavar="SECONDS")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = get_tenant(options["tenant"])
        projects = [get_project(tenant, slug) for slug in options["project"]]
        expires_in = options["expires_in"]
        if expires_in is not None and expires_in <= 0:
            raise CommandError("--expires-in must be a positive number of seconds")
        token, raw = call_service(
            services.token_create,
            tenant=tenant,
            name=options["name"],
            grants=options["grants"].split(","),
            projects=projects,
            expires_in=timedelta(seconds=expires_in) if expires_in else None,
        )
        audit_cli(
            action="token.create",
            tenant=tenant,
            object_type="token",
            object_id=token.prefix,
            details={"grants": token.grants, "projects": [p.slug for p in projects]},
        )
        scope = ", ".join(p.slug for p in projects) or "all projects"
        self.stdout.write(
            f"token {token.prefix} ({token.name}) for tenant {tenant.slug}, {scope}, "
            f"grants: {', '.join(token.grants)}; store it now, it is not shown again:"
        )
        self.stdout.write(raw)
