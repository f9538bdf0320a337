"""Liveness (``/healthz``) and readiness (``/readyz``: database, Redis and storage, and which tool
sandbox is in force)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """The process answers; it says nothing about its dependencies."""
    return JsonResponse({"status": "ok"})


#: How long /readyz waits for a pooled connection: a probe must answer well inside its own
#: timeout (8 s in deploy/k8s), not after the pool's request wait (``DATABASE_POOL_TIMEOUT``).
READYZ_DATABASE_WAIT_SECONDS = 2.0


def check_database() -> None:
    pool = getattr(connection, "pool", None) if connection.vendor == "postgresql" else None
    if pool is not None and connection.connection is None:  # the ASGI web process: pooled
        with pool.connection(timeout=READYZ_DATABASE_WAIT_SECONDS) as conn:
            conn.execute("SELECT 1").fetchone()
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def check_redis() -> None:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()


def check_storage() -> None:
    """Write, read back and delete a small probe object in the artifact storage."""
    name = f"_readyz/{uuid.uuid4().hex}"
    saved = default_storage.save(name, ContentFile(b"ok"))
    try:
        with default_storage.open(saved) as handle:
            if handle.read() != b"ok":
                raise RuntimeError("storage returned different bytes")
    finally:
        default_storage.delete(saved)


def check_sandbox() -> None:
    """Only when ``OPENRATH_SANDBOX=bwrap`` requires bubblewrap: fails while it cannot run."""
    from sessions_app.sandbox import sandbox_status

    status = sandbox_status()
    if not status.ok:
        raise RuntimeError(status.detail)


def readiness_checks() -> dict[str, Callable[[], None]]:
    from sessions_app.sandbox import sandbox_mode

    checks: dict[str, Callable[[], None]] = {"database": check_database}
    if settings.REDIS_URL:
        checks["redis"] = check_redis
    checks["storage"] = check_storage
    if sandbox_mode() == "bwrap":
        checks["sandbox"] = check_sandbox
    return checks


def sandbox_detail() -> dict[str, object]:
    """Which backend confines tool commands here (``bwrap`` or the ``local`` fallback), and why."""
    from sessions_app.sandbox import sandbox_status

    return sandbox_status().as_dict()


@require_GET
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when every configured dependency answers; 503 naming the ones that did not."""
    results: dict[str, dict[str, object]] = {}
    for name, check in readiness_checks().items():
        started = time.perf_counter()
        try:
            check()
        except Exception as exc:  # readiness reports any failure, whatever its type
            results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        else:
            results[name] = {"ok": True}
        results[name]["ms"] = round((time.perf_counter() - started) * 1000, 1)
    failed = sorted(name for name, r in results.items() if not r["ok"])
    body = {
        "status": "unavailable" if failed else "ready",
        "failed": failed,
        "checks": results,
        "sandbox": sandbox_detail(),
    }
    return JsonResponse(body, status=503 if failed else 200)
