"""The installed console scripts ``openrath-server``, ``openrath-worker``, ``openrath-migrate``
(OpenRath 2.0's command lines) and OpenRath's extras names.

Every script runs as a real process from a directory outside the repository, with no
``DJANGO_SETTINGS_MODULE`` (the script sets it) and a data directory of its own: on SQLite, and
on a fresh PostgreSQL database where the test says so.
"""

from __future__ import annotations

import importlib.metadata
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import tomllib
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from packaging.requirements import Requirement

from benchmarks.fuzz import free_port
from tests.support import REPO, require_postgres, service_missing

SCRIPTS = Path(sys.executable).parent
#: OpenRath 2.0.0's extras (its wheel's Provides-Extra).
OPENRATH_EXTRAS = (
    "litellm",
    "opensandbox",
    "openviking",
    "otel",
    "postgres",
    "redis",
    "s3",
    "server",
)
#: The extras of integrations this product does not have: accepted, install nothing.
EMPTY_EXTRAS = {"litellm", "opensandbox", "openviking", "otel"}


def script(name: str) -> str:
    path = SCRIPTS / name
    assert path.exists(), f"{path} is missing: reinstall the project (pip install -e .)"
    return str(path)


@pytest.fixture
def place(tmp_path):
    """A working directory outside the repository and the environment of a fresh install:
    its own data directory (SQLite), no settings module, no OpenRath variables."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "MIGRATION_DATABASE_URL"}
        and not key.startswith("OPENRATH_")
    }
    env.update(
        OPENRATH_DATA_DIR=str(tmp_path / "data"),
        OPENRATH_PROFILE="embedded",
        OPENRATH_DISPATCH="none",
        LOG_LEVEL="WARNING",
    )
    env.pop("HOSTNAME", None)
    return cwd, env


def run(place, name: str, *args: str, timeout: float = 180, **extra: str):
    cwd, env = place
    return subprocess.run(
        [script(name), *args],
        cwd=cwd,
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def sqlite_tables(place) -> list[str]:
    path = Path(place[1]["OPENRATH_DATA_DIR"]) / "db.sqlite3"
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        return [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]


@pytest.fixture
def postgres_database():
    """A fresh, empty PostgreSQL database on the test server (dropped afterwards); its URL."""
    import psycopg

    from tests.settings import TEST_DATABASE_URL

    require_postgres()  # skipped only on the embedded-profile pass; missing under CI: fails
    parts = urlsplit(TEST_DATABASE_URL)
    name = f"or_cli_{secrets.token_hex(4)}"

    def url(database: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, f"/{database}", "", ""))

    try:
        admin = psycopg.connect(url("postgres"), autocommit=True, connect_timeout=3)
    except Exception as exc:
        service_missing(f"needs PostgreSQL: {exc}")
    admin.execute(f"CREATE DATABASE {name}")
    try:
        yield url(name)
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


# --- --help and usage errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("openrath-server", ("--app", "--host", "--port", "--workers")),
        ("openrath-worker", ("--app", "--worker-id", "--lease-seconds", "--max-runs")),
        ("openrath-migrate", ("--dsn", "--schema", "--check")),
    ],
)
def test_help_lists_openraths_options(place, name, options):
    result = run(place, name, "--help", timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {name} ")
    for option in options:
        assert option in result.stdout
    assert "docs/migrating-from-openrath.md" in result.stdout
    assert sqlite_tables(place) == []


@pytest.mark.parametrize(
    ("name", "args", "env", "message"),
    [
        ("openrath-server", ["--app", "reference_app:app"], {}, "--app 'reference_app:app' does"),
        ("openrath-server", [], {"OPENRATH_APP": "reference_app:app"}, "OPENRATH_APP 'reference"),
        ("openrath-worker", ["--app", "reference_app:server"], {}, "OPENRATH_WORKFLOW_MODULES"),
        ("openrath-server", ["--workers", "0"], {}, "--workers must be at least 1"),
        ("openrath-server", [], {"OPENRATH_PORT": "eighty"}, "OPENRATH_PORT='eighty' is not"),
        ("openrath-worker", ["--lease-seconds", "2.5"], {}, "whole number of seconds"),
        ("openrath-worker", [], {"OPENRATH_WORKER_LEASE_SECONDS": "0"}, "at least 1"),
        ("openrath-migrate", ["--schema", "openrath"], {}, "--schema='openrath' does not apply"),
        ("openrath-migrate", [], {"OPENRATH_DB_SCHEMA": "tenant_a"}, "OPENRATH_DB_SCHEMA="),
        ("openrath-migrate", ["--dsn", "host=db dbname=openrath"], {}, "must be a URL"),
    ],
)
def test_options_that_do_not_apply_are_one_usage_error(place, name, args, env, message):
    result = run(place, name, *args, timeout=60, **env)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{name}: error: ")
    assert message in last
    assert result.stdout == ""
    assert sqlite_tables(place) == []  # refused before any database was touched


def test_app_option_names_what_to_do_instead(place):
    result = run(place, "openrath-server", "--app", "reference_app:app", timeout=60)
    last = result.stderr.strip().splitlines()[-1]
    for instead in ("openrath_project.asgi:application", "OPENRATH_WORKFLOW_MODULES"):
        assert instead in last
    assert "manage.py create_token" in last


# --- openrath-migrate ---------------------------------------------------------------------------


def test_migrate_check_refuses_an_unmigrated_database_then_migrate_fixes_it(place):
    before = run(place, "openrath-migrate", "--check")
    assert before.returncode == 1
    assert before.stderr.strip().splitlines() == [
        f"CommandError: {len(before.stdout.splitlines())} unapplied migration(s)"
    ]
    assert "unapplied: runs_app.0001_runs_initial" in before.stdout.splitlines()
    assert "runs_app_run" not in sqlite_tables(place)  # --check changed nothing

    applied = run(place, "openrath-migrate")
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.strip().splitlines()[-1].startswith("applied ")
    assert "runs_app_run" in sqlite_tables(place)

    after = run(place, "openrath-migrate", "--check")
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == "migrations are up to date"


@pytest.mark.postgres
def test_migrate_takes_openraths_dsn_on_postgresql(place, postgres_database):
    import psycopg

    before = run(place, "openrath-migrate", "--check", "--dsn", postgres_database)
    assert before.returncode == 1
    assert len(before.stderr.strip().splitlines()) == 1
    assert "unapplied migration(s)" in before.stderr
    with psycopg.connect(postgres_database) as db:
        assert db.execute("SELECT to_regclass('runs_app_run')").fetchone() == (None,)

    applied = run(place, "openrath-migrate", OPENRATH_POSTGRES_DSN=postgres_database)
    assert applied.returncode == 0, applied.stderr
    with psycopg.connect(postgres_database) as db:
        assert db.execute("SELECT to_regclass('runs_app_run')").fetchone() == ("runs_app_run",)
    after = run(place, "openrath-migrate", "--check", OPENRATH_POSTGRES_DSN=postgres_database)
    assert after.returncode == 0, after.stderr


# --- openrath-server ----------------------------------------------------------------------------


def test_server_serves_healthz_and_stops_on_sigterm(place, tmp_path):
    assert run(place, "openrath-migrate").returncode == 0
    cwd, env = place
    port = free_port()
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [script("openrath-server"), "--host", "127.0.0.1"],
        cwd=cwd,
        env={**env, "OPENRATH_PORT": str(port)},  # OpenRath's variable for the port
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline, body = time.monotonic() + 120, None
        while body is None and time.monotonic() < deadline:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                    assert r.status == 200
                    body = r.read()
            except OSError:
                time.sleep(0.25)
        assert body == b'{"status": "ok"}', (tmp_path / "server.log").read_text()
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
        log.close()
    output = (tmp_path / "server.log").read_text()
    # A graceful stop: uvicorn finishes the lifespan (the embedded workers stop), then re-raises
    # the signal it caught, as process managers expect.
    assert code == -signal.SIGTERM, output
    assert "Application shutdown complete." in output
    assert f"serving the embedded profile on http://127.0.0.1:{port}/" in output


# --- openrath-worker ----------------------------------------------------------------------------

WORKFLOWS = textwrap.dedent("""
    from django.conf import settings

    from openrath_project import flow


    class CliWorkerFlow(flow.Workflow):
        name = "cli-worker-flow"

        @flow.step(entry=True, successors=("finish",), effects="none")
        def start(self, state, ctx):
            return {**state, "lease_seconds": settings.OPENRATH_LEASE_SECONDS}

        @flow.step(effects="none")
        def finish(self, state, ctx):
            return {**state, "done": True}
""")

SUBMIT = textwrap.dedent("""
    import django

    django.setup()
    from openrath_project.tenancy.services import project_create, tenant_create
    from runs_app import services
    from runs_app.registration import workflows

    tenant = tenant_create(slug="cli")
    project = project_create(tenant=tenant, slug="cli")
    run, _ = services.run_create(
        project=project, workflow=workflows().get("cli-worker-flow"), state={"n": 1}
    )
    print(run.id)
""")

INSPECT = textwrap.dedent("""
    import json, sys

    import django

    django.setup()
    from runs_app.models import Run

    run = Run.objects.get(id=sys.argv[1])
    print(json.dumps({"status": run.status, "state": run.state}))
""")


def python(place, source: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    cwd, env = place
    return subprocess.run(
        [sys.executable, "-c", source, *args],
        cwd=cwd,
        env={**env, "DJANGO_SETTINGS_MODULE": "openrath_project.settings", **extra},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_worker_claims_and_finishes_a_queued_run(place, tmp_path, request, database):
    import json

    extra = {}
    if database == "postgres":
        extra["OPENRATH_POSTGRES_DSN"] = request.getfixturevalue("postgres_database")
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "cli_workflows.py").write_text(WORKFLOWS)
    extra.update(PYTHONPATH=str(modules), OPENRATH_WORKFLOW_MODULES="cli_workflows")
    assert run(place, "openrath-migrate", **extra).returncode == 0
    if database == "postgres":  # the scripts below read this product's variable
        extra["DATABASE_URL"] = extra.pop("OPENRATH_POSTGRES_DSN")
    submitted = python(place, SUBMIT, **extra)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()

    worked = run(
        place,
        "openrath-worker",
        "--worker-id",
        "cli-test",
        "--max-runs",
        "1",
        "--poll",
        "0.1",
        OPENRATH_WORKER_LEASE_SECONDS="45",
        **extra,
    )
    assert worked.returncode == 0, worked.stderr
    assert worked.stdout.strip().splitlines()[-2:] == ["executed 1 run(s)", "1"]
    seen = python(place, INSPECT, run_id, **extra)
    assert seen.returncode == 0, seen.stderr
    assert json.loads(seen.stdout) == {
        "status": "succeeded",
        "state": {"n": 1, "lease_seconds": 45, "done": True},
    }


# --- extras -------------------------------------------------------------------------------------


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_openraths_extras_are_declared_and_map_onto_the_base_requirements():
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    base = {str(Requirement(line)) for line in project["dependencies"]}
    for name in OPENRATH_EXTRAS:
        assert name in extras, name
        if name in EMPTY_EXTRAS:
            assert extras[name] == [], name
        else:
            assert extras[name], name
            for line in extras[name]:
                assert str(Requirement(line)) in base, (name, line)  # a no-op beyond the base


def test_the_installed_distribution_provides_openraths_extras_and_scripts():
    distribution = importlib.metadata.distribution("openrath-django")
    assert set(OPENRATH_EXTRAS) <= set(distribution.metadata.get_all("Provides-Extra") or ())
    scripts = {
        entry.name: entry.value
        for entry in distribution.entry_points
        if entry.group == "console_scripts"
    }
    assert scripts == {
        "openrath-server": "openrath_project.server.cli:server_main",
        "openrath-worker": "openrath_project.server.cli:worker_main",
        "openrath-migrate": "openrath_project.server.cli:migrate_main",
    }
    assert scripts == _pyproject()["project"]["scripts"]
