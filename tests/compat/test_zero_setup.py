"""Item 1: a plain script (no DJANGO_SETTINGS_MODULE, no server, a fresh data directory) uses
the library with no set-up; two scripts starting together both work; a configured Django
process is left alone."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from openrath_project import library
from openrath_project.errors import ValidationFailed
from sessions_app.value import Session, resolve_project
from tests.factories import ProjectFactory, TenantFactory

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    from openrath_project import flow
    from openrath_project.session import Session

    s = Session.from_user_message("hello")
    print("project", s.project.tenant.slug + "/" + s.project.slug)
    print("same-class", flow.Session is Session)
    print("chunks", [(row.kind.value, row.payload["content"]) for row in s.chunk_table])
    """
)


def _plain_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "OPENRATH_DEFAULT_PROJECT", "DATABASE_URL")
        and not k.startswith("OPENRATH_")
    }
    env.update(
        OPENRATH_DATA_DIR=str(data_dir),
        PYTHONPATH=str(ROOT),
        OPENRATH_SANDBOX="local",
        **extra,
    )
    return env


def _run(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _sessions_in(data_dir: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(data_dir / "db.sqlite3") as db:
        return db.execute(
            "SELECT t.slug, p.slug FROM sessions_app_session s "
            "JOIN tenancy_project p ON p.id = s.project_id "
            "JOIN tenancy_tenant t ON t.id = p.tenant_id"
        ).fetchall()


def test_plain_script_configures_migrates_and_uses_the_default_project(tmp_path):
    data_dir = tmp_path / "data"
    result = _run(SCRIPT, tmp_path, _plain_env(data_dir))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "project local/default",
        "same-class True",
        "chunks [('user', 'hello')]",
    ]
    # Quietly: nothing of the migration is printed.
    assert "Applying" not in result.stdout + result.stderr
    assert (data_dir / "db.sqlite3").is_file()
    assert _sessions_in(data_dir) == [("local", "default")]

    again = _run(SCRIPT, tmp_path, _plain_env(data_dir))
    assert again.returncode == 0, again.stderr
    assert _sessions_in(data_dir) == [("local", "default")] * 2


def test_the_library_tenant_and_a_named_project_are_honoured(tmp_path):
    data_dir = tmp_path / "data"
    env = _plain_env(data_dir, OPENRATH_LIBRARY_TENANT="scripts")
    assert _run(SCRIPT, tmp_path, env).stdout.splitlines()[0] == "project scripts/default"
    named = textwrap.dedent(
        """
        from openrath_project.session import Session
        from openrath_project.tenancy.services import project_create, tenant_create
        from openrath_project import library

        library.ensure_ready()
        project_create(tenant=tenant_create(slug="acme"), slug="research")
        s = Session.from_user_message("hi", project="acme/research")
        print(s.project.tenant.slug, s.project.slug)
        """
    )
    result = _run(named, tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["acme", "research"]


def test_two_scripts_starting_together_on_a_fresh_directory_both_work(tmp_path):
    data_dir = tmp_path / "data"
    env = _plain_env(data_dir)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert out.splitlines()[0] == "project local/default"
    assert _sessions_in(data_dir) == [("local", "default")] * 2


@pytest.mark.django_db
def test_inside_a_configured_django_process_nothing_changes(monkeypatch):
    monkeypatch.delenv("OPENRATH_DEFAULT_PROJECT", raising=False)
    library.ensure_ready()
    assert library.is_library_process() is False
    ProjectFactory(tenant=TenantFactory(slug="acme"), slug="a")
    ProjectFactory(tenant=TenantFactory(slug="globex"), slug="b")
    # Two projects and no name: the server-side rule stands (no silent default project).
    with pytest.raises(ValidationFailed, match="say which project"):
        resolve_project(None)
    with pytest.raises(ValidationFailed):
        Session.from_user_message("x")
    from openrath_project.tenancy.models import Tenant

    assert not Tenant.objects.filter(slug="local").exists()


def test_a_script_logs_warnings_only_unless_asked(tmp_path):
    """A script's output is its own, as with OpenRath: the INFO lines a server logs (the tool
    sandbox chosen, each model request) appear only with ``LOG_LEVEL=INFO``."""
    example = ROOT / "tests" / "compat" / "scripts" / "example_04.py"

    def stderr_of(**extra: str) -> str:
        data_dir = tmp_path / f"data-{len(extra)}"
        env = {**_plain_env(data_dir, **extra), "OPENRATH_SANDBOX": "auto"}
        result = subprocess.run(
            [sys.executable, str(example)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stderr

    assert " INFO " not in stderr_of()
    assert " INFO " in stderr_of(LOG_LEVEL="INFO")
