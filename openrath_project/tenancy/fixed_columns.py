"""Columns fixed at creation: an object's tenant and project never change, revocation is one-way.

Every model with a foreign key to :class:`Tenant` or :class:`Project` (the *owner columns*:
projects, tokens, memberships, sessions, chunks, runs, interrupts, effects, memory, audit rows
...) keeps the owner it was created with. Moving a row to another tenant would hand its data,
or a token's grants, to that tenant; moving it to another project would cross a project-limited
token's scope. A token's ``revoked_at`` is set once and never cleared or moved.

Enforced twice, in the same terms:

* in the model layer, by :func:`check_owner_unchanged` (a ``pre_save`` check connected for every
  such model by the app config: one place for every app's models, so none can forget it), and
* in the database, by ``BEFORE UPDATE`` triggers on PostgreSQL and SQLite (:data:`GUARDS`,
  installed by :func:`install_guards`), so a ``QuerySet.update``, raw SQL or another client
  cannot do it either. They refuse with a check violation (Django's ``IntegrityError``).

The triggers are installed after every ``migrate`` (``post_migrate``, like Django's own
permissions), not by one migration: SQLite rebuilds a table on many ``ALTER``\\ s and drops its
triggers, and a model added later is covered without anyone remembering to. Installing is
idempotent and cheap when nothing changed (one catalog query): each trigger's name carries a
digest of its definition, so a changed definition replaces the old trigger.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.apps import apps
from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper

from openrath_project.errors import Conflict

#: Prefix of every trigger installed here (nothing else may use it).
TRIGGER_PREFIX = "orguard_"
#: The PostgreSQL function the triggers call: raises its first argument as a check violation.
PG_FUNCTION = "openrath_refuse_change"


class FixedColumnChanged(Conflict):
    """An update tried to change a column that is fixed at creation (a tenant, a project)."""


@cache
def owner_columns(model: type[models.Model]) -> tuple[str, ...]:
    """The database columns of ``model`` that name its tenant or project (sorted)."""
    from openrath_project.tenancy.models import Project, Tenant

    return tuple(
        sorted(
            field.column
            for field in model._meta.concrete_fields
            if isinstance(field, models.ForeignKey) and field.related_model in (Tenant, Project)
        )
    )


def owned_models() -> list[type[models.Model]]:
    """Every installed model with owner columns (its tenant or project is fixed)."""
    return [
        model
        for model in apps.get_models()
        if not model._meta.proxy and model._meta.managed and owner_columns(model)
    ]


# --- The model layer ---------------------------------------------------------------------------


def check_owner_unchanged(
    sender: type[models.Model], instance: models.Model, **kwargs: Any
) -> None:
    """``pre_save``: refuse to save an existing row with another tenant or project.

    Costs one primary-key read when an existing row is saved with its owner columns (a save
    with ``update_fields`` that leaves them out costs nothing)."""
    if instance._state.adding or kwargs.get("raw"):
        return
    fields = [
        f
        for f in sender._meta.concrete_fields
        if isinstance(f, models.ForeignKey) and f.column in owner_columns(sender)
    ]
    update_fields = kwargs.get("update_fields")
    if update_fields is not None:
        fields = [f for f in fields if f.name in update_fields or f.attname in update_fields]
    if not fields:
        return
    stored = (
        sender._base_manager.using(kwargs.get("using"))
        .filter(pk=instance.pk)
        .values(*(f.attname for f in fields))
        .first()
    )
    if stored is None:
        return  # no such row yet: Django will insert it
    changed = [f.name for f in fields if stored[f.attname] != getattr(instance, f.attname)]
    if changed:
        raise FixedColumnChanged(
            f"{sender._meta.label}: {', '.join(changed)} is fixed at creation",
            details={name: ["fixed at creation"] for name in changed},
        )


# --- The database ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Guard:
    """One ``BEFORE UPDATE`` trigger: refuse the update when ``condition`` holds.

    ``condition`` is SQL over ``OLD`` and ``NEW`` with ``{changed:<column>}`` placeholders,
    each spelled per backend (``IS DISTINCT FROM`` / ``IS NOT``)."""

    table: str
    columns: tuple[str, ...]
    condition: str
    message: str

    def sql_condition(self, vendor: str) -> str:
        text = self.condition
        for column in self.columns:
            text = text.replace(f"{{changed:{column}}}", _changed(vendor, column))
        return text

    def name(self, vendor: str) -> str:
        definition = f"{vendor}|{self.table}|{self.columns}|{self.sql_condition(vendor)}"
        digest = hashlib.sha256(f"{definition}|{self.message}".encode()).hexdigest()[:10]
        return f"{TRIGGER_PREFIX}{self.table}_{digest}"[:63]


def _changed(vendor: str, column: str) -> str:
    operator = "IS DISTINCT FROM" if vendor == "postgresql" else "IS NOT"
    return f'(OLD."{column}" {operator} NEW."{column}")'


def _guards() -> list[Guard]:
    from openrath_project.tenancy.models import ApiToken

    guards = [
        Guard(
            table=model._meta.db_table,
            columns=owner_columns(model),
            condition=" OR ".join(f"{{changed:{c}}}" for c in owner_columns(model)),
            message=(
                f"openrath: {model._meta.db_table}."
                f"{'/'.join(owner_columns(model))} is fixed at creation"
            ),
        )
        for model in owned_models()
    ]
    guards.append(
        Guard(
            table=ApiToken._meta.db_table,
            columns=("revoked_at",),
            condition='OLD."revoked_at" IS NOT NULL AND {changed:revoked_at}',
            message=f"openrath: {ApiToken._meta.db_table}.revoked_at: revocation is one-way",
        )
    )
    return guards


def guards() -> list[Guard]:
    """Every trigger this module installs (owner columns of every model, one-way revocation)."""
    return _guards()


def _create_sql(vendor: str, guard: Guard) -> list[str]:
    name = guard.name(vendor)
    columns = ", ".join(f'"{c}"' for c in guard.columns)
    condition = guard.sql_condition(vendor)
    message = guard.message.replace("'", "''")
    if vendor == "postgresql":
        return [
            f'CREATE TRIGGER "{name}" BEFORE UPDATE OF {columns} ON "{guard.table}" '
            f"FOR EACH ROW WHEN ({condition}) EXECUTE FUNCTION {PG_FUNCTION}('{message}')"
        ]
    return [
        f'CREATE TRIGGER "{name}" BEFORE UPDATE OF {columns} ON "{guard.table}" '
        f"FOR EACH ROW WHEN {condition} BEGIN SELECT RAISE(ABORT, '{message}'); END"
    ]


def _pg_function_sql() -> str:
    return (
        f"CREATE OR REPLACE FUNCTION {PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'check_violation'; END; $$"
    )


def installed_guards(connection: BaseDatabaseWrapper) -> dict[str, str]:
    """The installed triggers of this module: name -> table."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT t.tgname, c.relname FROM pg_trigger t "
                "JOIN pg_class c ON c.oid = t.tgrelid "
                "WHERE NOT t.tgisinternal AND starts_with(t.tgname, %s)",
                [TRIGGER_PREFIX],
            )
        else:
            cursor.execute(
                "SELECT name, tbl_name FROM sqlite_master "
                "WHERE type = 'trigger' AND substr(name, 1, %s) = %s",
                [len(TRIGGER_PREFIX), TRIGGER_PREFIX],
            )
        return {str(name): str(table) for name, table in cursor.fetchall()}


def install_guards(using: str = "default") -> list[str]:
    """Create the missing triggers (and drop stale ones) on ``using``; returns what it created.

    Tables that do not exist (an app migrated to zero) are skipped."""
    connection = connections[using]
    vendor = connection.vendor
    if vendor not in ("postgresql", "sqlite"):
        return []
    tables = set(connection.introspection.table_names())
    wanted = {g.name(vendor): g for g in guards() if g.table in tables}
    present = installed_guards(connection)
    created: list[str] = []
    with connection.cursor() as cursor:
        for name, table in sorted(present.items()):
            if name not in wanted:
                on = f' ON "{table}"' if vendor == "postgresql" else ""
                cursor.execute(f'DROP TRIGGER IF EXISTS "{name}"{on}')
        missing = [g for name, g in sorted(wanted.items()) if name not in present]
        if missing and vendor == "postgresql":
            cursor.execute(_pg_function_sql())
        for guard in missing:
            for statement in _create_sql(vendor, guard):
                cursor.execute(statement)
            created.append(guard.name(vendor))
    return created


def install_guards_after_migrate(using: str = "default", **kwargs: Any) -> None:
    """``post_migrate`` receiver (sent once per app: it acts for the tenancy app only)."""
    install_guards(using)


def missing_guards(using: str = "default") -> list[str]:
    """Guards that should be installed on ``using`` and are not (for checks and tests)."""
    connection = connections[using]
    present = installed_guards(connection)
    tables = set(connection.introspection.table_names())
    return sorted(
        f"{g.table}: {g.columns}"
        for g in guards()
        if g.table in tables and g.name(connection.vendor) not in present
    )
