"""Database access from the WebSocket consumers: ``database_sync_to_async`` on a small pool.

Thread-sensitive ``database_sync_to_async`` would queue every stream's reads behind one thread;
the streams read on their own pool instead (``OPENRATH_WS_DB_THREADS`` threads, so at most that
many database connections per process, kept for ``CONN_MAX_AGE`` like any other).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import connections

_executor: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=_size(), thread_name_prefix="openrath-ws-db")
        return _executor


def _size() -> int:
    return max(1, int(getattr(settings, "OPENRATH_WS_DB_THREADS", 8)))


def db_call(fn: Any) -> Any:
    """``database_sync_to_async(fn)`` on the streaming pool (closes obsolete connections
    before and after, as channels does)."""
    return database_sync_to_async(fn, thread_sensitive=False, executor=_pool())


def close_db_pool(timeout: float = 10.0) -> None:
    """Close every pool thread's database connections and stop the pool (the next call starts a
    new one). For tests and orderly shutdown."""
    global _executor
    with _lock:
        executor, _executor = _executor, None
    if executor is None:
        return
    workers = executor._max_workers
    barrier = threading.Barrier(workers, timeout=timeout)

    def close_here() -> None:
        # One task per thread: each waits at the barrier, so no thread runs two of them.
        for connection in connections.all(initialized_only=True):
            connection.close()
        barrier.wait()

    futures = [executor.submit(close_here) for _ in range(workers)]
    for future in futures:
        future.result(timeout=timeout)
    executor.shutdown(wait=True)
