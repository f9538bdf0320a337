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
