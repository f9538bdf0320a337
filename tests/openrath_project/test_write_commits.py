"""One WAL flush per write: the web process's pooled connections commit without waiting for the
flush (settings, ``DATABASE_ASYNC_COMMIT``) and the audit row's commit is synchronous whatever
the session says (``audit_record``), so it makes the request's earlier commits durable too."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from openrath_project import settings as project_settings
from openrath_project.tenancy.models import AuditEvent, Tenant
from openrath_project.tenancy.services import audit_record
from tests.support import require_postgres

SET_CONFIG = "SELECT set_config('synchronous_commit', 'on', true)"


def show(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return str(cursor.fetchone()[0])


def audit_inserts(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "tenancy_auditevent" in q["sql"]]


@pytest.mark.django_db(transaction=True)
def test_the_audit_rows_commit_flushes_the_asynchronous_ones_before_it() -> None:
    require_postgres()
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit TO off")
    try:
        tenant = Tenant.objects.create(slug="flushed", name="flushed")  # committed, not flushed
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_insert_lsn()")
            written = cursor.fetchone()[0]
        with CaptureQueriesContext(connection) as queries:
            event = audit_record(
                actor="test", action="tenant.create", outcome="success", tenant=tenant
            )
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", [written])
            assert cursor.fetchone()[0] is True
        [insert] = audit_inserts(queries)
        assert SET_CONFIG in insert  # the same statement
        assert len(queries.captured_queries) == 1  # no round trip of its own
        assert show("synchronous_commit") == "off"  # only the audit row's transaction
        stored = AuditEvent.objects.get(pk=event.pk)
        assert (stored.action, stored.tenant_id, stored.outcome) == (
            "tenant.create",
            tenant.id,
            "success",
        )
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET synchronous_commit")


@pytest.mark.django_db
def test_an_api_write_is_answered_after_its_synchronous_audit_row(
    make_token: Any, project: Any
) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['sessions:write'])}")
    with CaptureQueriesContext(connection) as queries:
        response = client.post(
            "/api/v1/sessions/", {"project": project.slug, "user_message": "hi"}, format="json"
        )
    assert response.status_code == 201
    [insert] = audit_inserts(queries)
    assert (SET_CONFIG in insert) is (connection.vendor == "postgresql")
    assert list(AuditEvent.objects.values_list("action", "object_id")) == [
        ("session.create", response.json()["id"])
    ]


def test_only_the_pooled_web_process_commits_asynchronously(monkeypatch: Any) -> None:
    url = "postgres://app@127.0.0.1:5432/openrath"
    environ: dict[str, str] = {}
    monkeypatch.setattr(project_settings.env, "ENVIRON", environ)  # settings read a snapshot
    environ["DATABASE_POOL"] = "true"
    environ["OPENRATH_DISPATCH"] = "celery"  # runs are executed by other processes
    assert project_settings._database(url)["OPTIONS"]["options"] == "-c synchronous_commit=off"
    environ["DATABASE_ASYNC_COMMIT"] = "false"
    assert "options" not in project_settings._database(url)["OPTIONS"]
    del environ["DATABASE_ASYNC_COMMIT"]
    # Embedded workers in the web process: their step commits and ledger intents share the
    # pool, and no audit row flushes them.
    environ["OPENRATH_DISPATCH"] = "local"
    assert "options" not in project_settings._database(url)["OPTIONS"]
    environ["DATABASE_ASYNC_COMMIT"] = "true"  # asked for anyway: refused, with the reason
    with pytest.raises(ImproperlyConfigured, match="OPENRATH_DISPATCH=celery"):
        project_settings._database(url)
    del environ["DATABASE_ASYNC_COMMIT"]
    environ["OPENRATH_DISPATCH"] = "celery"
    environ["DATABASE_POOL"] = "false"  # workers: persistent connections, synchronous commits
    assert "options" not in project_settings._database(url)["OPTIONS"]
