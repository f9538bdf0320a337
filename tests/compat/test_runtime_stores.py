"""``PostgresRunStore``'s OpenRath keywords (``schema=``, ``auto_migrate=``,
``pool_max_size=``) with OpenRath's meaning, or one clear error naming what to use; and
OpenRath's audit sink, refused by name."""

from __future__ import annotations

import pytest

from openrath_project.compat import OpenRathNameUnsupported
from tests.support import require_postgres


def _dsn() -> str:
    from django.db import connection

    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"schema": "Not-Safe"}, "schema must be a safe lower-case PostgreSQL identifier"),
        ({"pool_max_size": 0}, "pool_max_size must be a positive integer"),
        ({"pool_max_size": True}, "pool_max_size must be a positive integer"),
    ],
)
def test_bad_keywords_are_refused_before_anything_is_touched(keywords, message):
    from openrath_project.runtime import PostgresRunStore

    with pytest.raises(ValueError, match=message):
        PostgresRunStore("postgres://nowhere.invalid/none", **keywords)
    with pytest.raises(ValueError, match="dsn must not be empty"):
        PostgresRunStore("  ")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_schema_must_be_the_connections_schema():
    require_postgres()
    from django.db import connection

    from openrath_project.runtime import PostgresEffectLedger, PostgresRunStore, StoreMismatch

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        (current,) = cursor.fetchone()
    store = PostgresRunStore(_dsn(), schema=current)
    assert store.schema == current
    assert PostgresEffectLedger(_dsn(), schema=current).schema == current
    with pytest.raises(StoreMismatch, match=r"search path \(\?options=-csearch_path%3Dopenrath\)"):
        PostgresRunStore(_dsn(), schema="openrath")
    with pytest.raises(StoreMismatch, match="schema 'public'|schema"):
        PostgresEffectLedger(_dsn(), schema="openrath")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_auto_migrate_applies_migrations_and_is_idempotent():
    require_postgres()
    from openrath_project.runtime import PostgresRunStore, RunStatus
    from openrath_project.tenancy.dbroles import unapplied_migrations

    store = PostgresRunStore(_dsn(), auto_migrate=True)
    assert unapplied_migrations() == []
    assert store.list_runs(status=RunStatus.QUEUED) == ()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_pool_max_size_must_match_the_configured_pool():
    require_postgres()
    from django.db import connection

    from openrath_project.runtime import PostgresRunStore, StoreMismatch

    pool = connection.settings_dict.get("OPTIONS", {}).get("pool")
    if isinstance(pool, dict):  # a pooled test database: its own size is accepted
        assert PostgresRunStore(_dsn(), pool_max_size=pool["max_size"]).dsn == _dsn()
    with pytest.raises(StoreMismatch, match="DATABASE_POOL_MAX_SIZE"):
        PostgresRunStore(_dsn(), pool_max_size=987)


def test_sqlite_store_refuses_postgres_keywords():
    from openrath_project.runtime import SQLiteRunStore

    with pytest.raises(TypeError):
        SQLiteRunStore("/tmp/x.db", schema="openrath")


@pytest.mark.parametrize("name", ["StructuredAuditSink", "AuditSink", "InMemoryAuditSink"])
def test_openrath_audit_sinks_are_refused_naming_the_audit_trail(name):
    import openrath_project.security as security

    with pytest.raises(OpenRathNameUnsupported) as caught:
        getattr(security, name)
    assert caught.value.openrath_name == name
    assert "GET /api/v1/audit/" in str(caught.value)
    assert f"OpenRath's rath.security.{name}" in str(caught.value)
    with pytest.raises(ImportError, match="StructuredAuditSink"):
        from openrath_project.security import StructuredAuditSink  # noqa: F401
    with pytest.raises(AttributeError):
        security.NeverOpenRaths  # noqa: B018
