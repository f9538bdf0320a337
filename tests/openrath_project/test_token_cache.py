"""The bearer-token cache: no token queries within the bound, revocation honoured at the bound,
expiry at once, and each request its own model instances."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from openrath_project.api import authentication
from openrath_project.api.authentication import TokenCache, principal_for_bearer, token_cache
from openrath_project.tenancy.models import ApiToken, AuditEvent
from openrath_project.tenancy.services import TokenRejected, token_revoke

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def empty_cache(settings: Any) -> Any:
    settings.OPENRATH_TOKEN_CACHE_SECONDS = 5.0
    token_cache.clear()
    yield
    token_cache.clear()


class Clock:
    """``time.monotonic`` of the authentication module, moved by hand."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(authentication.time, "monotonic", lambda: self.now)


def token_queries(queries: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"]
        for q in queries.captured_queries
        if "tenancy_apitoken" in q["sql"] or "tenancy_project" in q["sql"]
    ]


def test_a_cached_token_costs_no_token_or_project_query(make_token: Any, project: Any) -> None:
    raw = make_token(["sessions:read"], projects=[project])
    first = principal_for_bearer(raw)
    with CaptureQueriesContext(connection) as queries:
        again = principal_for_bearer(raw)
    assert token_queries(queries) == []
    assert len(queries.captured_queries) == 0
    assert again.actor == first.actor
    assert again.project_ids == frozenset({project.id})
    assert again.grants == frozenset({"sessions:read"})


def test_each_hit_has_its_own_model_instances(make_token: Any) -> None:
    raw = make_token(["sessions:read"])
    one, two = principal_for_bearer(raw), principal_for_bearer(raw)
    assert one.token is not two.token
    assert one.tenant is not two.tenant
    assert one.token is not None
    assert one.token.tenant is one.tenant
    assert one.tenant.id == two.tenant.id


def test_a_revoked_token_is_refused_once_the_bound_has_passed(
    make_token: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    raw = make_token(["sessions:read"])
    principal_for_bearer(raw)
    # Revoked by another process (manage.py revoke_token, another web worker): this process's
    # cache does not know.
    ApiToken.objects.filter(prefix=raw.removeprefix("ort_").split("_", 1)[0]).update(
        revoked_at=timezone.now()
    )
    clock.now += 4.9  # inside the documented bound: the process may still accept it
    assert principal_for_bearer(raw).actor.startswith("token:")
    clock.now += 0.1  # 5 s after the database check: refused
    with pytest.raises(TokenRejected, match="token revoked"):
        principal_for_bearer(raw)
    clock.now += 100  # and stays refused (a rejection is never cached)
    with pytest.raises(TokenRejected, match="token revoked"):
        principal_for_bearer(raw)


def test_a_token_revoked_in_this_process_is_refused_on_the_next_request(
    make_token: Any,
) -> None:
    raw = make_token(["sessions:read"])
    principal_for_bearer(raw)
    token_revoke(prefix=raw)
    with pytest.raises(TokenRejected, match="token revoked"):
        principal_for_bearer(raw)


def test_with_the_cache_off_a_revocation_is_refused_on_the_next_request(
    settings: Any, make_token: Any
) -> None:
    settings.OPENRATH_TOKEN_CACHE_SECONDS = 0
    raw = make_token(["sessions:read"])
    principal_for_bearer(raw)
    token_revoke(prefix=raw)
    with pytest.raises(TokenRejected, match="token revoked"):
        principal_for_bearer(raw)
    assert len(token_cache._entries) == 0


def test_an_expired_token_is_refused_at_once_from_the_cache(
    make_token: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = make_token(["sessions:read"], expires_in=timedelta(hours=1))
    principal_for_bearer(raw)
    later = timezone.now() + timedelta(hours=2)
    monkeypatch.setattr(timezone, "now", lambda: later)
    with pytest.raises(TokenRejected, match="token expired"):
        principal_for_bearer(raw)


def test_the_cache_keys_by_digest_never_the_raw_token(make_token: Any) -> None:
    raw = make_token(["sessions:read"])
    principal_for_bearer(raw)
    keys = list(token_cache._entries)
    assert len(keys) == 1
    assert raw.encode() not in keys[0]
    assert len(keys[0]) == 32


def test_a_wrong_secret_with_a_known_prefix_is_refused_though_the_token_is_cached(
    make_token: Any,
) -> None:
    raw = make_token(["sessions:read"])
    principal_for_bearer(raw)
    forged = raw[:-4] + ("aaaa" if not raw.endswith("aaaa") else "bbbb")
    with pytest.raises(TokenRejected, match="invalid bearer token"):
        principal_for_bearer(forged)


def test_the_cache_drops_its_oldest_entries_when_full() -> None:
    cache = TokenCache(max_entries=8)
    marker: Any = object()
    for i in range(8):
        cache.put(bytes([i]) * 32, marker, now=0.0)
    cache.put(b"\xff" * 32, marker, now=0.0)
    assert cache.get(bytes([0]) * 32, ttl=5, now=1.0) is None  # the oldest went
    assert cache.get(b"\xff" * 32, ttl=5, now=1.0) is marker
    assert cache.get(b"\xff" * 32, ttl=5, now=5.0) is None  # at the bound: gone


def test_a_revoked_token_over_the_api_is_a_401_and_audited_after_the_bound(
    make_token: Any, project: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    raw = make_token(["sessions:read"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/sessions/").status_code == 200
    token_revoke(prefix=raw)
    clock.now += 5.0
    before = AuditEvent.objects.count()
    response = client.get("/api/v1/sessions/")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "token revoked"
    denial = AuditEvent.objects.order_by("-id").first()
    assert AuditEvent.objects.count() == before + 1
    assert denial is not None
    assert denial.outcome == "denied"
    assert denial.actor == f"token:{raw.split('_')[1]}"
