"""Token secrets: hashed at rest, shown once, never in logs or audit rows."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection

from openrath_project.errors import ValidationFailed
from openrath_project.tenancy.models import ApiToken, AuditEvent
from openrath_project.tenancy.services import (
    TokenRejected,
    token_authenticate,
    token_create,
    token_revoke,
)

pytestmark = pytest.mark.django_db


def _all_text_in_database() -> str:
    """Every row of every table, as text: a secret must not be anywhere in it."""
    parts = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # noqa: S608
            parts.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(parts)


def test_secret_is_hashed_and_shown_once(tenant, project, client_for, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    token, raw = token_create(
        tenant=tenant, name="ci", grants=["projects:read"], projects=[project]
    )
    secret = raw.split("_", 2)[2]
    assert token.secret_hash != raw
    assert len(token.secret_hash) == 64
    assert token_authenticate(raw).pk == token.pk
    # use it, fail with it, mint one through the CLI: none of it may leak the secret
    assert client_for(raw).get("/api/v1/projects/").status_code == 200
    assert (
        client_for(raw).post("/api/v1/projects/", {"slug": "x"}, format="json").status_code == 403
    )
    call_command("create_token", "acme", "--grants", "runs:read", "--name", "cli")
    printed = capsys.readouterr().out.strip().splitlines()
    cli_raw = printed[-1]
    assert cli_raw.startswith("ort_")
    assert token_authenticate(cli_raw).name == "cli"
    dump = _all_text_in_database()
    logs = caplog.text
    for value in (raw, secret, cli_raw, cli_raw.split("_", 2)[2]):
        assert value not in dump
        assert value not in logs
    assert AuditEvent.objects.exists()
    for row in AuditEvent.objects.values_list("details", "actor", "object_id"):
        assert secret not in repr(row)


def test_unknown_grant_is_refused(tenant):
    with pytest.raises(ValidationFailed, match="unknown grant"):
        token_create(tenant=tenant, name="x", grants=["projects:read", "root:everything"])
    with pytest.raises(ValidationFailed, match="at least one grant"):
        token_create(tenant=tenant, name="x", grants=[])
    assert not ApiToken.objects.exists()


def test_project_of_another_tenant_is_refused(tenant, foreign_project):
    with pytest.raises(ValidationFailed, match="not in tenant"):
        token_create(tenant=tenant, name="x", grants=["runs:read"], projects=[foreign_project])


def test_wildcard_means_every_grant(tenant):
    token, _ = token_create(tenant=tenant, name="all", grants=["*"])
    assert "tokens:manage" in token.grants
    assert len(token.grants) == 15


def test_rejections_say_why(tenant):
    token, raw = token_create(
        tenant=tenant, name="t", grants=["runs:read"], expires_in=timedelta(hours=1)
    )
    with pytest.raises(TokenRejected, match="malformed"):
        token_authenticate("hello")
    with pytest.raises(TokenRejected, match="invalid"):
        token_authenticate(raw[:-2] + ("AA" if not raw.endswith("AA") else "BB"))
    token_revoke(prefix=token.prefix)
    first_revocation = ApiToken.objects.get(pk=token.pk).revoked_at
    token_revoke(prefix=token.prefix)  # idempotent
    assert ApiToken.objects.get(pk=token.pk).revoked_at == first_revocation
    with pytest.raises(TokenRejected, match="revoked"):
        token_authenticate(raw)


def test_last_used_is_recorded(tenant, client_for):
    token, raw = token_create(tenant=tenant, name="t", grants=["projects:read"])
    assert token.last_used_at is None
    client_for(raw).get("/api/v1/projects/")
    token.refresh_from_db()
    assert token.last_used_at is not None
