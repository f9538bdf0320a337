"""Liveness (``/healthz``) and readiness (``/readyz``: database, Redis and storage, which tool
sandbox is in force, and whether any worker can claim runs).

``workers`` in the body says whether a worker can claim: in the embedded profile, this process's
worker threads (started by the ASGI lifespan); elsewhere, the workers whose heartbeat is recent
(``runs_app.heartbeats``: ``run_worker`` loops and the Celery worker executing beat's reconcile,
recorded in Redis). It never fails readiness: a web process without workers still serves the
API and the console (runs wait, queued), and taking it out of service would turn a worker outage
into a full one. Alert on ``workers.can_claim`` instead.
"""

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
        pool.open()  # Django opens it on first use; a probe may come first (no-op once open)
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


def check_migrations() -> None:
    """The production web process started while the database was unreachable: ready once the
    database answers and its migrations are applied (``openrath_project.startup``)."""
    from openrath_project.startup import web_gate

    if web_gate is not None and not web_gate.check():
        raise RuntimeError(web_gate.reason)


def check_workflows() -> None:
    """The workflow modules import. Only a process that skipped the start-up check can fail
    it (an ASGI server without the lifespan protocol): the others refuse to start on it."""
    from runs_app.registration import workflow_modules_problem

    problem = workflow_modules_problem()
    if problem is not None:
        raise RuntimeError(problem)


def readiness_checks() -> dict[str, Callable[[], None]]:
    from openrath_project.startup import web_gate
    from runs_app.registration import workflow_modules_problem
    from sessions_app.sandbox import sandbox_mode

    checks: dict[str, Callable[[], None]] = {}
    if web_gate is not None and not web_gate.open:
        checks["migrations"] = check_migrations
    if workflow_modules_problem() is not None:
        checks["workflows"] = check_workflows
    checks["database"] = check_database
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


def workers_detail() -> dict[str, object]:
    """Whether any worker can claim runs, and what says so (see the module docstring)."""
    from runs_app import heartbeats

    wanted = heartbeats.embedded_workers_wanted()
    if wanted:
        alive = heartbeats.embedded_workers_alive()
        return {"can_claim": alive > 0, "source": "embedded", "alive": alive, "expected": wanted}
    if not settings.REDIS_URL:
        return {
            "can_claim": None,
            "source": "none",
            "detail": "no embedded workers and no Redis to record heartbeats in: unknown",
        }
    try:
        seen = heartbeats.recent()
    except Exception as exc:  # readiness reports any failure, whatever its type
        return {
            "can_claim": None,
            "source": "heartbeats",
            "detail": f"{type(exc).__name__}: {exc}"[:300],
        }
    return {
        "can_claim": bool(seen),
        "source": "heartbeats",
        "within_seconds": heartbeats.HEARTBEAT_TTL_SECONDS,
        "seen": dict(sorted(seen.items())),
    }


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
            # 600: room for a whole workflow-module message (module, cause and fix).
            results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:600]}
        else:
            results[name] = {"ok": True}
        results[name]["ms"] = round((time.perf_counter() - started) * 1000, 1)
    failed = sorted(name for name, r in results.items() if not r["ok"])
    body = {
        "status": "unavailable" if failed else "ready",
        "failed": failed,
        "checks": results,
        "sandbox": sandbox_detail(),
        "workers": workers_detail(),
    }
    return JsonResponse(body, status=503 if failed else 200)
