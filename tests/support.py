"""Helpers for tests that need real services: skip locally with a reason, fail under CI=true."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn

import pytest

CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
REPO = Path(__file__).resolve().parent.parent


def service_missing(reason: str) -> NoReturn:
    """Skip (locally) or fail (CI=true): a test never passes by skipping in CI."""
    if CI:
        pytest.fail(f"required service missing under CI=true: {reason}")
    pytest.skip(reason)


def require_postgres() -> None:
    from django.conf import settings
    from django.db import connection

    if connection.vendor != "postgresql":
        from tests import settings as test_settings

        reason = getattr(test_settings, "POSTGRES_UNAVAILABLE", "") or "not PostgreSQL"
        message = f"needs PostgreSQL ({settings.DATABASES['default']['ENGINE']}): {reason}"
        if getattr(test_settings, "SQLITE_FORCED", False):
            # OPENRATH_TEST_DB=sqlite is chosen on purpose (CI's embedded-profile pass): PostgreSQL
            # is not missing there, so this is a skip even under CI=true.
            pytest.skip(message)
        service_missing(message)


def require_redis() -> str:
    from tests.settings import TEST_REDIS_URL

    try:
        import redis

        client = redis.Redis.from_url(TEST_REDIS_URL, socket_connect_timeout=2)
        client.ping()
        client.close()
    except Exception as exc:
        service_missing(f"needs Redis at {TEST_REDIS_URL}: {exc}")
    return TEST_REDIS_URL


def run_manage(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py`` in a fresh interpreter (real process start-up, real settings)."""
    full_env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    full_env["DJANGO_SETTINGS_MODULE"] = "openrath_project.settings"
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
        cwd=REPO,
    )


def error_of(response: Any) -> dict[str, Any]:
    """The documented error body of a response; fails the test when the shape is wrong."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    return body["error"]


def process_alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (dead, waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return False
    return data[data.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def column_values(obj: Any) -> dict[str, Any]:
    """A model instance's concrete columns by attribute name: two reads of one row compare
    equal when every column does."""
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}
