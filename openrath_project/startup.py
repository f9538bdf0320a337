"""Start-up guards for long-running processes (web, worker, beat).

In the production profile a process refuses to start while migrations are unapplied: the
runtime role cannot apply them (no DDL), and running old code against a new schema, or new code
against an old one, is how data gets lost.
"""

from __future__ import annotations

import sys

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor


def unapplied_migrations(alias: str = DEFAULT_DB_ALIAS) -> list[str]:
    """``app.migration`` names that the database behind ``alias`` has not applied yet."""
    connection = connections[alias]
    executor = MigrationExecutor(connection)
    targets = executor.loader.graph.leaf_nodes()
    plan = executor.migration_plan(targets)
    return [
        f"{migration.app_label}.{migration.name}" for migration, backwards in plan if not backwards
    ]


class UnappliedMigrations(SystemExit):
    pass


def announce_sandbox() -> None:
    """Probe the tool sandbox now and log which one is in force (a WARNING for the fallback)."""
    from sessions_app.sandbox import sandbox_status

    sandbox_status()


def require_migrations_applied(process: str) -> None:
    """Exit with a readable message when the production database is behind the code.

    Every long-running process calls this at start, so it also announces the tool sandbox.
    """
    announce_sandbox()
    if not settings.PRODUCTION:
        return
    pending = unapplied_migrations()
    if pending:
        shown = ", ".join(pending[:5]) + (" ..." if len(pending) > 5 else "")
        message = (
            f"Refusing to start {process}: {len(pending)} unapplied migration(s) ({shown}). "
            "Run `openrath-migrate` with the owner role (MIGRATION_DATABASE_URL) first."
        )
        print(message, file=sys.stderr)
        raise UnappliedMigrations(message)
