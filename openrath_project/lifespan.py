"""The ASGI process's own services: the lifespan protocol and the start-up gate.

* :class:`Lifespan` checks at ``lifespan.startup`` that the workflow modules import (in every
  profile): when they do not, the start-up fails with one line naming the module, the cause
  and the fix, and the server exits without serving (``openrath_project.startup``). Then it
  starts the embedded profile's worker threads (once per process:
  ``runs_app.worker.start_embedded_workers`` is idempotent) and stops them at
  ``lifespan.shutdown``.
  A server without the lifespan protocol starts no workers: run ``manage.py run_worker`` beside
  it (``/readyz`` then reports ``workers.can_claim: false`` for the web process's own threads).
* :class:`StartupGateMiddleware` wraps HTTP and WebSocket: in production, until the database was
  found migrated (``openrath_project.startup.MigrationGate``), it answers every path but
  ``/healthz`` and ``/readyz`` with a 503 error body (and closes WebSockets).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from asgiref.sync import sync_to_async

from openrath_project.errors import error_body
from openrath_project.startup import MigrationGate

logger = logging.getLogger(__name__)

#: Paths served while the gate is closed: liveness, and readiness (which reports why).
UNGATED_PATHS = frozenset({"/healthz", "/readyz"})


class StartupRefused(Exception):
    """A configuration the process cannot serve with; its message is the whole report."""


def start_process_services() -> int:
    """Start this process's embedded worker threads when the profile runs them; how many."""
    from runs_app.heartbeats import embedded_workers_wanted
    from runs_app.worker import start_embedded_workers

    wanted = embedded_workers_wanted()
    if not wanted:
        return 0
    return len(start_embedded_workers(wanted))


def stop_process_services() -> None:
    from runs_app.worker import stop_embedded_workers

    stop_embedded_workers()


_started = False


def ensure_started() -> None:
    global _started
    if not _started:
        from openrath_project.startup import migrate_embedded_database, workflow_modules_refusal

        refusal = workflow_modules_refusal("the ASGI web process")
        if refusal is not None:
            raise StartupRefused(refusal)
        migrate_embedded_database()  # before its workers poll the tables
        start_process_services()
        _started = True


class Lifespan:
    """The ASGI lifespan protocol."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await sync_to_async(ensure_started, thread_sensitive=False)()
                except StartupRefused as exc:  # the server logs the line and exits
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                except Exception as exc:  # the server reports it and does not start
                    logger.exception("could not start the process's services")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await sync_to_async(stop_process_services, thread_sensitive=False)()
                await send({"type": "lifespan.shutdown.complete"})
                return


class StartupGateMiddleware:
    def __init__(self, inner: Any, *, gate: MigrationGate | None) -> None:
        self.inner = inner
        self.gate = gate

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        gate = self.gate
        if (
            gate is not None
            and not gate.open
            and scope.get("path") not in UNGATED_PATHS
            and not await sync_to_async(gate.check, thread_sensitive=False)()
        ):
            await self._refuse(scope, send, gate.reason)
            return
        await self.inner(scope, receive, send)

    async def _refuse(self, scope: dict[str, Any], send: Any, reason: str) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1013})  # try again later
            return
        body = json.dumps(
            error_body("database_unavailable", f"not ready: {reason}; retry shortly")
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", b"5"),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
