"""Abuse limits: write rate per token (token bucket), with Retry-After; reads not limited."""

from __future__ import annotations

import pytest

from openrath_project.api.throttling import local_buckets, take
from openrath_project.tenancy.models import Project
from tests.support import error_of, require_redis

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def small_bucket(settings):
    settings.OPENRATH_RATE_LIMIT_BURST = 3
    settings.OPENRATH_RATE_LIMIT_WRITES_PER_MINUTE = 6  # one token every 10 s
    local_buckets.clear()


def test_writes_beyond_the_burst_are_429(make_token, client_for, tenant):
    writer = client_for(make_token(["projects:read", "projects:write"]))
    other = client_for(make_token(["projects:write"]))
    statuses = [
        writer.post("/api/v1/projects/", {"slug": f"p{i}"}, format="json").status_code
        for i in range(5)
    ]
    assert statuses == [201, 201, 201, 429, 429]
    limited = writer.post("/api/v1/projects/", {"slug": "late"}, format="json")
    assert limited.status_code == 429
    assert error_of(limited)["code"] == "rate_limited"
    assert 1 <= int(limited["Retry-After"]) <= 10
    assert not Project.objects.filter(slug__in=["p3", "p4", "late"]).exists()
    # another token has its own bucket; reads are not limited by it
    assert other.post("/api/v1/projects/", {"slug": "other"}, format="json").status_code == 201
    assert all(writer.get("/api/v1/projects/").status_code == 200 for _ in range(10))


def test_bucket_refills(monkeypatch, settings):
    clock = [1000.0]
    monkeypatch.setattr("openrath_project.api.throttling.time.time", lambda: clock[0])
    results = [take("k") for _ in range(4)]
    assert [allowed for allowed, _ in results] == [True, True, True, False]
    assert results[-1][1] == pytest.approx(10.0)
    clock[0] += 10.0
    assert take("k")[0] is True
    assert take("k")[0] is False


def test_buckets_in_redis_are_shared(settings):
    settings.REDIS_URL = require_redis()
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete("openrath:rl:shared-key")
    try:
        assert [take("shared-key")[0] for _ in range(4)] == [True, True, True, False]
        local_buckets.clear()  # a different process would not see local buckets: Redis holds it
        assert take("shared-key")[0] is False
    finally:
        client.delete("openrath:rl:shared-key")
        client.close()
