"""Workers: claim runs from the database and execute them.

* :class:`Worker` — the database-claiming loop of ``manage.py run_worker`` (and each thread of
  the embedded pool). It needs nothing but the database: runs finish while Redis is down.
* :func:`start_embedded_workers` — the embedded profile's in-process threads, woken by local
  dispatch hints and polling as a fallback.
* The reconciler runs in every loop every few seconds (it is safe to run anywhere, any number
  of times).

A script and a server may share one data directory: the script's runs belong to the library
tenant (``openrath_project.library``, ``local`` by default) and the script executes them itself,
with workflows the server may not have (or has in another version). So the embedded workers,
which serve the server, skip that tenant's runs (``skip_tenants``); ``run_worker`` and Celery
claim everything, as before.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

from django.db import close_old_connections, connection

from openrath_project.library import library_tenant_slug
from runs_app import dispatch, heartbeats, reconciler
from runs_app.executor import Outcome, run_one
from runs_app.registration import workflows

logger = logging.getLogger(__name__)


def worker_name(prefix: str = "worker") -> str:
    return f"{prefix}:{socket.gethostname()}:{os.getpid()}:{threading.get_ident() % 100000}"


class Worker:
    """Claims and executes runs until stopped."""

    def __init__(
        self,
        *,
        name: str | None = None,
        poll_seconds: float = 0.5,
        reconcile_every: float = 5.0,
        process_mode: bool = False,
        skip_tenants: tuple[str, ...] = (),
    ) -> None:
        self.name = name or worker_name()
        #: Tenant slugs whose runs this worker leaves to others (the library tenant).
        self.skip_tenants = skip_tenants
        self.poll_seconds = poll_seconds
        self.reconcile_every = reconcile_every
        self.process_mode = process_mode
        self.wakeup = threading.Event()
        self.stopping = threading.Event()
        self.executed = 0
        self._last_reconcile = 0.0

    def notify(self, run_id: uuid.UUID | None = None) -> None:
        self.wakeup.set()

    def stop(self) -> None:
        self.stopping.set()
        self.wakeup.set()

    def reconcile_if_due(self) -> None:
        now = time.monotonic()
        if now - self._last_reconcile < self.reconcile_every:
            return
        self._last_reconcile = now
        heartbeats.record(self.name)  # best effort; /readyz reports the recent ones
        try:
            result = reconciler.reconcile()
            if result.expired_leases or result.timed_out or result.failed_crashes:
                logger.info("reconciled: %s", result)
        except Exception:
            logger.exception("reconcile failed")
            close_old_connections()

    def run_once(self) -> Outcome | None:
        try:
            return run_one(
                self.name,
                registry=workflows(),
                process_mode=self.process_mode,
                skip_tenants=self.skip_tenants,
            )
        except Exception:
            logger.exception("worker %s failed while executing a run", self.name)
            connection.close()  # a broken connection must not poison the next claim
            return None

    def loop(self, *, max_runs: int | None = None, idle_exit: float | None = None) -> int:
        """Claim and execute until stopped (or ``max_runs`` executed, or idle that long)."""
        idle_since = time.monotonic()
        try:
            while not self.stopping.is_set():
                self.reconcile_if_due()
                outcome = self.run_once()
                if outcome is not None:
                    self.executed += 1
                    idle_since = time.monotonic()
                    if max_runs is not None and self.executed >= max_runs:
                        break
                    continue
                if idle_exit is not None and time.monotonic() - idle_since > idle_exit:
                    break
                self.wakeup.wait(self.poll_seconds)
                self.wakeup.clear()
        finally:
            connection.close()
        return self.executed


_embedded: list[Worker] = []
_embedded_lock = threading.Lock()


def start_embedded_workers(count: int) -> list[Worker]:
    """Start the embedded profile's in-process worker threads (once per process). They do not
    claim the library tenant's runs: scripts execute those themselves."""
    with _embedded_lock:
        if _embedded:
            return list(_embedded)
        for index in range(max(1, count)):
            worker = Worker(
                name=f"embedded:{socket.gethostname()}:{os.getpid()}:{index}",
                reconcile_every=5.0 + index,
                skip_tenants=(library_tenant_slug(),),
            )
            dispatch.add_local_listener(worker.notify)
            thread = threading.Thread(
                target=worker.loop, name=f"openrath-worker-{index}", daemon=True
            )
            thread.start()
            _embedded.append(worker)
            heartbeats.embedded_worker_started(thread, worker.stopping)
        logger.info("started %d embedded worker thread(s)", len(_embedded))
        return list(_embedded)


def stop_embedded_workers() -> None:
    with _embedded_lock:
        for worker in _embedded:
            worker.stop()
        _embedded.clear()
        heartbeats.embedded_workers_stopped()
