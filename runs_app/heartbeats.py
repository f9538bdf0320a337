"""Worker heartbeats: which workers could claim runs lately (what ``/readyz`` reports).

Every worker loop (``run_worker`` and the embedded threads) records one at each reconcile
pass (every ~5 s), and so does the Celery worker that executes beat's ``reconcile`` task (every
5 s): a Celery worker that consumes the queue. A heartbeat is a Redis key
``openrath:worker-heartbeat:<name>`` holding the time, which expires after
``HEARTBEAT_TTL_SECONDS``; without Redis (the embedded profile) nothing is recorded and
``/readyz`` reports this process's embedded threads instead (``runs_app.worker`` registers
them here as it starts them). Recording is best effort: a worker never waits for or fails
because of Redis (runs finish while Redis is down).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

KEY_PREFIX = "openrath:worker-heartbeat:"
#: A heartbeat older than this is gone: the worker stopped, froze or lost Redis.
HEARTBEAT_TTL_SECONDS = 30
#: After a failed write, a worker tries again only after this long.
RETRY_AFTER_FAILURE_SECONDS = 30.0

_failed_at = float("-inf")


def _client() -> Any:
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)


def record(name: str) -> bool:
    """Record that worker ``name`` is alive and claiming (``False`` when nothing was written)."""
    global _failed_at
    if not settings.REDIS_URL or time.monotonic() - _failed_at < RETRY_AFTER_FAILURE_SECONDS:
        return False
    try:
        client = _client()
        try:
            client.set(f"{KEY_PREFIX}{name}", f"{time.time():.3f}", ex=HEARTBEAT_TTL_SECONDS)
        finally:
            client.close()
    except Exception as exc:  # best effort: Redis is not needed to run
        _failed_at = time.monotonic()
        logger.warning("could not record the heartbeat of %s: %s", name, exc)
        return False
    return True


def recent() -> dict[str, float]:
    """Worker name -> seconds since its last heartbeat (unexpired ones). Raises when Redis
    does not answer."""
    client = _client()
    try:
        names = [k.decode() for k in client.scan_iter(match=f"{KEY_PREFIX}*", count=500)]
        values = client.mget(names) if names else []
    finally:
        client.close()
    now = time.time()
    seen: dict[str, float] = {}
    for key, value in zip(names, values, strict=True):
        if value is None:
            continue
        seen[key.removeprefix(KEY_PREFIX)] = round(max(0.0, now - float(value)), 1)
    return seen


# --- This process's embedded workers (what /readyz reports in the embedded profile) ---------

_embedded: list[tuple[threading.Thread, threading.Event]] = []
_embedded_lock = threading.Lock()


def embedded_workers_wanted() -> int:
    """How many embedded worker threads this profile runs in the web process (0: none)."""
    if settings.OPENRATH_DISPATCH != "local":
        return 0
    return max(0, int(settings.OPENRATH_EMBEDDED_WORKERS))


def embedded_worker_started(thread: threading.Thread, stopping: threading.Event) -> None:
    """``runs_app.worker`` started an embedded worker in ``thread``; ``stopping`` is set when it
    is told to stop."""
    with _embedded_lock:
        _embedded.append((thread, stopping))


def embedded_workers_stopped() -> None:
    """``runs_app.worker`` told this process's embedded workers to stop."""
    with _embedded_lock:
        _embedded.clear()


def embedded_workers_alive() -> int:
    """Embedded worker threads of this process that are running (and not told to stop)."""
    with _embedded_lock:
        return sum(
            1 for thread, stopping in _embedded if thread.is_alive() and not stopping.is_set()
        )
