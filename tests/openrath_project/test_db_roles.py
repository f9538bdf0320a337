"""Migrations as a separate role, on a real PostgreSQL: the runtime role has DML only."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support import REPO, run_manage, service_missing

pytestmark = pytest.mark.postgres


def _server_url(database: str, user: str | None = None) -> str:
    from tests.settings import TEST_DATABASE_URL

    parts = urlsplit(TEST_DATABASE_URL)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 5432
    login = user or parts.username or "postgres"
    return urlunsplit((parts.scheme, f"{login}@{host}:{port}", f"/{database}", "", ""))


@pytest.fixture
def role_database(tmp_path):
    """A fresh database owned by a new owner role, plus a runtime role with no rights yet."""
    import psycopg

    suffix = secrets.token_hex(4)
    owner, runtime, name = f"or_owner_{suffix}", f"or_rt_{suffix}", f"or_roles_{suffix}"
    try:
        admin = psycopg.connect(_server_url("postgres"), autocommit=True, connect_timeout=3)
    except Exception as exc:
        service_missing(f"needs PostgreSQL: {exc}")
    admin.execute(f"CREATE ROLE {owner} LOGIN")
    admin.execute(f"CREATE ROLE {runtime} LOGIN")
    admin.execute(f"CREATE DATABASE {name} OWNER {owner}")
    env = {
        "DATABASE_URL": _server_url(name, runtime),
        "MIGRATION_DATABASE_URL": _server_url(name, owner),
        "OPENRATH_DATA_DIR": str(tmp_path),
        "OPENRATH_PROFILE": "embedded",
    }
    try:
        yield env
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"DROP ROLE IF EXISTS {runtime}")
        admin.execute(f"DROP ROLE IF EXISTS {owner}")
        admin.close()


def _migrate(env, *args):
    script = Path(sys.executable).parent / "openrath-migrate"
    import os

    full = {**os.environ, **env}
    full.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [str(script), *args], env=full, capture_output=True, text=True, timeout=300, cwd=REPO
    )


PRODUCTION = {
    "OPENRATH_PROFILE": "production",
    "REDIS_URL": "redis://127.0.0.1:6379/15",
    "SECRET_KEY": "k3y-" + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP",
    "ALLOWED_HOSTS": "localhost",
    "S3_BUCKET": "artifacts",
    "S3_ACCESS_KEY_ID": "id",
    "S3_SECRET_ACCESS_KEY": "secret",
    "S3_ENDPOINT_URL": "http://127.0.0.1:1",
}


def _import_entry_point(env, module):
    import os

    full = {**os.environ, **env, **PRODUCTION}
    full["DJANGO_SETTINGS_MODULE"] = "openrath_project.settings"
    return subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_runtime_role_is_dml_only(role_database):
    import psycopg

    env = role_database
    before = _migrate(env, "--check")
    assert before.returncode != 0
    assert "unapplied migration" in before.stderr
    assert "unapplied: tenancy.0001_tenancy_initial" in before.stdout

    refused = _import_entry_point(env, "openrath_project.wsgi")
    assert refused.returncode != 0
    assert "Refusing to start the WSGI web process" in refused.stderr
    assert "openrath-migrate" in refused.stderr

    applied = _migrate(env)
    assert applied.returncode == 0, applied.stderr
    assert "granted runtime role or_rt_" in applied.stdout.strip().splitlines()[-1]
    after = _migrate(env, "--check")
    assert after.returncode == 0, after.stderr

    started = _import_entry_point(env, "openrath_project.wsgi")
    assert started.returncode == 0, started.stderr

    # the app works as the runtime role
    made = run_manage("create_tenant", "roles-ok", env=env)
    assert made.returncode == 0, made.stderr
    api = run_manage(
        "shell",
        "-c",
        "from django.test import Client; "
        "from openrath_project.tenancy.models import Tenant; "
        "from openrath_project.tenancy.services import token_create; "
        "_, raw = token_create(tenant=Tenant.objects.get(slug='roles-ok'), name='t', "
        "grants=['projects:write']); "
        "r = Client().post('/api/v1/projects/', {'slug': 'p1'}, content_type='application/json', "
        "HTTP_AUTHORIZATION='Bearer ' + raw, HTTP_HOST='localhost'); print(r.status_code)",
        env=env,
    )
    assert api.returncode == 0, api.stderr
    assert api.stdout.strip().splitlines()[-1] == "201"

    with psycopg.connect(env["DATABASE_URL"], autocommit=True) as runtime:
        assert runtime.execute("SELECT count(*) FROM tenancy_auditevent").fetchone()[0] >= 2
        for statement in (
            "CREATE TABLE sneaky (id int)",
            "UPDATE tenancy_auditevent SET action = 'rewritten'",
            "DELETE FROM tenancy_auditevent",
            "TRUNCATE tenancy_auditevent",
            "ALTER TABLE tenancy_project ADD COLUMN x int",
            "DROP TABLE tenancy_project",
            "DELETE FROM django_migrations",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                runtime.execute(statement)
        assert (
            runtime.execute(
                "SELECT count(*) FROM tenancy_auditevent WHERE action = 'rewritten'"
            ).fetchone()[0]
            == 0
        )
        # but ordinary DML on ordinary tables works
        runtime.execute("UPDATE tenancy_project SET name = 'renamed' WHERE slug = 'p1'")
