from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from openrath_project.tenancy.management.cli import get_tenant
from openrath_project.tenancy.models import ApiToken


class Command(BaseCommand):
    help = "List a tenant's API tokens (never their secrets). Prints the count on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = get_tenant(options["tenant"])
        tokens = ApiToken.objects.filter(tenant=tenant).prefetch_related("projects")
        count = 0
        for token in tokens:
            count += 1
            state = "revoked" if token.revoked_at else "active"
            projects = ",".join(sorted(p.slug for p in token.projects.all())) or "*"
            self.stdout.write(
                f"{token.prefix}\t{state}\t{token.name}\tprojects={projects}\t"
                f"grants={','.join(token.grants)}\texpires={token.expires_at or '-'}\t"
                f"last_used={token.last_used_at or '-'}"
            )
        self.stdout.write(f"{count} token(s)")
