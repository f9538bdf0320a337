"""Liveness and readiness."""

from __future__ import annotations

import pytest
from django.test import override_settings

pytestmark = pytest.mark.django_db


def test_healthz(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_checks_database_and_storage(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "ready"
    assert body["failed"] == []
    assert set(body["checks"]) == {"database", "storage"}


@override_settings(REDIS_URL="redis://127.0.0.1:1/0")
def test_readyz_names_the_failed_dependency(client):
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["failed"] == ["redis"]
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["redis"]["ok"] is False


def test_readyz_with_real_redis(client, settings):
    from tests.support import require_redis

    settings.REDIS_URL = require_redis()
    response = client.get("/readyz")
    assert response.status_code == 200
    assert set(response.json()["checks"]) == {"database", "redis", "storage"}


@pytest.fixture
def fresh_sandbox_status():
    from sessions_app.sandbox import reset_sandbox_status

    reset_sandbox_status()
    yield
    reset_sandbox_status()


def test_readyz_says_which_tool_sandbox_is_in_force(client, fresh_sandbox_status, monkeypatch):
    from sessions_app.sandbox import sandbox_status

    monkeypatch.delenv("OPENRATH_SANDBOX", raising=False)
    body = client.get("/readyz").json()
    status = sandbox_status()
    assert body["sandbox"] == {
        "mode": "auto",
        "backend": status.backend,
        "os_sandbox": status.backend == "bwrap",
        "ok": True,
        "detail": status.detail,
    }
    assert "sandbox" not in body["checks"]  # auto never fails readiness: it falls back


def test_readyz_reports_the_fallback(client, fresh_sandbox_status, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENRATH_BWRAP", str(tmp_path / "missing"))
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["sandbox"]["backend"] == "local"
    assert response.json()["sandbox"]["os_sandbox"] is False
    assert response.json()["sandbox"]["detail"].startswith(
        "falling back to the path-confined local backend: bwrap is not installed"
    )


def test_readyz_fails_when_required_bwrap_cannot_run(
    client, fresh_sandbox_status, monkeypatch, tmp_path
):
    monkeypatch.setenv("OPENRATH_SANDBOX", "bwrap")
    monkeypatch.setenv("OPENRATH_BWRAP", str(tmp_path / "missing"))
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["sandbox"]
    assert body["checks"]["sandbox"]["ok"] is False
    assert body["checks"]["sandbox"]["error"].startswith(
        "RuntimeError: OPENRATH_SANDBOX=bwrap but bwrap is not installed"
    )
    assert body["sandbox"]["ok"] is False


def test_readyz_with_required_bwrap_that_works(client, fresh_sandbox_status, monkeypatch):
    from sessions_app.sandbox import bwrap_probe
    from tests.support import service_missing

    if not bwrap_probe().ok:
        service_missing(f"needs bubblewrap: {bwrap_probe().detail}")
    monkeypatch.setenv("OPENRATH_SANDBOX", "bwrap")
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"]["sandbox"]["ok"] is True
    assert response.json()["sandbox"]["backend"] == "bwrap"
