from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from openrath_project.tenancy.dbroles import (
    grant_runtime_role,
    migration_alias,
    unapplied_migrations,
)


class Command(BaseCommand):
    help = (
        "Apply migrations with the owner role (MIGRATION_DATABASE_URL) and grant the runtime "
        "role (DATABASE_URL) exactly what it needs. With --check: change nothing, exit non-zero "
        "when migrations are unapplied."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = migration_alias()
        try:
            pending = unapplied_migrations(alias)
        except Exception as exc:
            raise CommandError(f"cannot read the migration state: {exc}") from exc
        if options["check"]:
            if pending:
                for name in pending:
                    self.stdout.write(f"unapplied: {name}")
                raise CommandError(f"{len(pending)} unapplied migration(s)")
            self.stdout.write("migrations are up to date")
            return
        call_command("migrate", database=alias, interactive=False, verbosity=options["verbosity"])
        granted = grant_runtime_role(alias)
        connections[alias].close()
        role_note = f"; granted runtime role {granted}" if granted else ""
        self.stdout.write(f"applied {len(pending)} migration(s){role_note}")
