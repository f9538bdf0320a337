from __future__ import annotations

from collections.abc import Sequence
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


def split_grants(values: Sequence[str] | str) -> list[str]:
    """The grant names of ``--grants``: each value may itself be a comma-separated list."""
    if isinstance(values, str):  # call_command(..., grants="a,b") passes the bare string
        values = [values]
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


class Command(BaseCommand):
    help = (
        "Mint an API token for a tenant. The token is printed once, alone on the last line; "
        f"only its hash is stored. Grants: {', '.join(GRANTS)} (or '*'), separated by "
        "spaces or commas: --grants runs:read runs:write, or --grants runs:read,runs:write."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant")
        parser.add_argument(
            "--grants",
            required=True,
            nargs="+",
            metavar="GRANT",
            help=(
                "grant names, space- and/or comma-separated (e.g. runs:read runs:write); "
                "'*' means every grant. Give the tenant before --grants."
            ),
        )
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
            grants=split_grants(options["grants"]),
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
        scope = ", ".join(p.slug for p in projects) or "all"
        named = f" named {token.name!r}" if token.name != token.prefix else ""  # the default
        self.stdout.write(
            f"token {token.prefix}{named} for tenant {tenant.slug}, projects: {scope}, "
            f"grants: {', '.join(token.grants)}; store it now, it is not shown again:"
        )
        self.stdout.write(raw)
