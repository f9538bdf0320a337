from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from openrath_project.tenancy import services
from openrath_project.tenancy.management.cli import audit_cli, call_service


class Command(BaseCommand):
    help = "Revoke an API token by its prefix. Prints the prefix on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix", help="the token's public prefix (or the token itself)")

    def handle(self, *args: Any, **options: Any) -> None:
        token = call_service(services.token_revoke, prefix=options["prefix"])
        audit_cli(
            action="token.revoke", tenant=token.tenant, object_type="token", object_id=token.prefix
        )
        self.stdout.write(f"revoked token {token.prefix} ({token.name}) at {token.revoked_at}")
        self.stdout.write(token.prefix)
