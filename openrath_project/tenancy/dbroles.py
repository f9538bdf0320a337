"""Database roles: the owner applies migrations; the runtime role gets DML only.

``openrath-migrate`` runs :func:`grant_runtime_role` after every migration, so new tables are
covered. Append-only tables (models with ``append_only_for_runtime = True``) get no UPDATE,
DELETE or TRUNCATE; ``django_migrations`` is read-only for the runtime.

:func:`unapplied_migrations` says what a database still lacks: ``openrath-migrate --check``, the
start-up guards (``openrath_project.startup``) and a script's first use
(``openrath_project.library``) ask it.
"""

from __future__ import annotations

from django.apps import apps
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor


def migration_alias() -> str:
    """The owner connection when configured (``MIGRATION_DATABASE_URL``), else ``default``."""
    return "migrations" if "migrations" in settings.DATABASES else "default"


def unapplied_migrations(alias: str = DEFAULT_DB_ALIAS) -> list[str]:
    """``app.migration`` names that the database behind ``alias`` has not applied yet."""
    executor = MigrationExecutor(connections[alias])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [
        f"{migration.app_label}.{migration.name}" for migration, backwards in plan if not backwards
    ]


def append_only_tables() -> list[str]:
    return sorted(
        model._meta.db_table
        for model in apps.get_models()
        if getattr(model, "append_only_for_runtime", False)
    )


def runtime_grant_statements(role: str, *, alias: str = "default") -> list[str]:
    """The SQL that gives ``role`` exactly what the runtime needs (documented in operations.md)."""
    q = connections[alias].ops.quote_name
    r = q(role)
    statements = [
        f"GRANT USAGE ON SCHEMA public TO {r}",
        f"REVOKE CREATE ON SCHEMA public FROM {r}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {r}",
        f"REVOKE TRUNCATE, REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA public FROM {r}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {r}",
        f"REVOKE INSERT, UPDATE, DELETE ON {q('django_migrations')} FROM {r}",
    ]
    statements += [f"REVOKE UPDATE, DELETE ON {q(t)} FROM {r}" for t in append_only_tables()]
    return statements


def grant_runtime_role(alias: str) -> str:
    """Grant the runtime role its rights; returns its name, or '' when there is nothing to do."""
    connection = connections[alias]
    role = settings.RUNTIME_DATABASE_ROLE
    if connection.vendor != "postgresql" or not role:
        return ""
    if role == connection.settings_dict.get("USER"):
        return ""  # one role for everything: nothing to separate
    with connection.cursor() as cursor:
        for statement in runtime_grant_statements(role, alias=alias):
            cursor.execute(statement)
    return role
