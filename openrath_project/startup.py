"""Start-up guards for long-running processes (web, worker, beat).

In the production profile a process refuses to start while migrations are unapplied: the
runtime role cannot apply them (no DDL), and running old code against a new schema, or new code
against an old one, is how data gets lost.

While the database is unreachable at start:

* a worker or beat process exits non-zero with one readable line (its orchestrator restarts it);
* the ASGI web process keeps serving ``/healthz`` (it is alive) and answers ``/readyz`` and every
  other request with a 503 until the database answers; then it checks the migrations once, and
  from there serves (or keeps answering 503, naming the unapplied migrations). A Kubernetes
  Service sends it no traffic meanwhile, and the liveness probe does not restart it in a loop.

Workflow modules (``OPENRATH_WORKFLOW_MODULES``) that cannot be imported are a configuration
error, not an outage: nothing but a corrected environment and a restart fixes them. So every
process that runs or starts workflows (the ASGI web process at lifespan start-up, ``serve``,
``quickstart``, ``run_worker``, the Celery worker) refuses to start with one line naming the
module, the cause and the fix (:func:`workflow_modules_refusal`), and exits non-zero: under
Kubernetes the pod crash-loops with that line in its log and a rolling update stops with the
old pods still serving, as for unapplied migrations. Celery beat executes no workflow and does
not check.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from openrath_project.library import migrate_if_needed
from openrath_project.tenancy.dbroles import unapplied_migrations
from openrath_project.tracing_setup import configure_tracing

logger = logging.getLogger(__name__)


class UnappliedMigrations(SystemExit):
    pass


def announce_sandbox() -> None:
    """Probe the tool sandbox now and log which one is in force (a WARNING for the fallback)."""
    from sessions_app.sandbox import sandbox_status

    sandbox_status()


class DatabaseUnreachable(SystemExit):
    pass


class WorkflowModulesUnimportable(SystemExit):
    pass


def workflow_modules_refusal(process: str) -> str | None:
    """The one line a process refuses to start with when its workflow modules cannot be
    registered; ``None`` when they can (importing them now, once for the process)."""
    from runs_app.registration import workflow_modules_problem

    problem = workflow_modules_problem()
    return None if problem is None else f"Refusing to start {process}: {problem}"


def require_workflow_modules(process: str) -> None:
    """Exit with one readable line (status 1, no traceback) when the workflow modules cannot
    be registered (see the module docstring)."""
    message = workflow_modules_refusal(process)
    if message is not None:
        print(message, file=sys.stderr)
        raise WorkflowModulesUnimportable(1) from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


def _pending_message(process: str, pending: list[str]) -> str:
    shown = ", ".join(pending[:5]) + (" ..." if len(pending) > 5 else "")
    return (
        f"Refusing to start {process}: {len(pending)} unapplied migration(s) ({shown}). "
        "Run `openrath-migrate` with the owner role (MIGRATION_DATABASE_URL) first."
    )


def _unreachable_message(process: str, exc: BaseException) -> str:
    return f"Cannot start {process}: the database is unreachable ({_one_line(exc)})."


def migrate_embedded_database() -> None:
    """The embedded profile sets itself up as a plain script does: its SQLite database is
    migrated at the first start on a fresh data directory (under the directory's lock, so a
    script and a server starting at once migrate it once). A production database is never
    migrated by the processes that serve it (``openrath-migrate``, a separate role)."""
    if connections[DEFAULT_DB_ALIAS].vendor == "sqlite":
        migrate_if_needed(Path(settings.DATA_DIR))


def require_migrations_applied(process: str) -> None:
    """Exit with a readable message when the production database is behind the code, or
    unreachable (one line, exit status 1, no traceback).

    Every long-running process calls this at start, so it also announces the tool sandbox
    and sets up tracing (off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set).
    """
    announce_sandbox()
    configure_tracing(process)
    if not settings.PRODUCTION:
        migrate_embedded_database()
        return
    try:
        pending = unapplied_migrations()
    except DatabaseError as exc:
        message = _unreachable_message(process, exc)
        print(message, file=sys.stderr)
        raise DatabaseUnreachable(1) from None  # the line above is the whole message
    finally:
        connections[DEFAULT_DB_ALIAS].close()
    if pending:
        message = _pending_message(process, pending)
        print(message, file=sys.stderr)
        raise UnappliedMigrations(message)


class MigrationGate:
    """The web process's start-up check, repeated until the database answers once.

    ``open`` once the migrations were found applied; until then :meth:`check` (at most every
    ``retry_seconds``) tries again and ``reason`` says why it is closed.
    """

    def __init__(self, process: str, *, retry_seconds: float = 2.0) -> None:
        self.process = process
        self.retry_seconds = retry_seconds
        self.open = False
        self.reason = "the database has not been checked yet"
        self._last_attempt = float("-inf")
        self._lock = threading.Lock()

    def check(self, *, at_start: bool = False) -> bool:
        """``True`` once migrations are applied. At start, unapplied migrations exit
        (:class:`UnappliedMigrations`); later they keep the gate closed (a running server
        does not exit under its requests) and ``reason`` names them."""
        if self.open:
            return True
        with self._lock:
            if self.open:
                return True
            now = time.monotonic()
            if not at_start and now - self._last_attempt < self.retry_seconds:
                return False
            self._last_attempt = now
            try:
                from openrath_project.health import check_database

                check_database()  # bounded (a pooled connection waits at most 2 s)
                pending = unapplied_migrations()
            except Exception as exc:  # DatabaseError, or the pool's PoolTimeout
                self.reason = f"the database is unreachable ({_one_line(exc)})"
                if at_start:
                    print(
                        f"{self.process}: {self.reason}; serving /healthz, and 503 on /readyz "
                        "and every other request until it answers",
                        file=sys.stderr,
                    )
                return False
            finally:
                connections[DEFAULT_DB_ALIAS].close()
            if pending:
                message = _pending_message(self.process, pending)
                if at_start:
                    print(message, file=sys.stderr)
                    raise UnappliedMigrations(message)
                self.reason = message
                return False
            if not at_start:
                logger.info("%s: the database answers and its migrations are applied", self.process)
            self.open = True
            self.reason = ""
            return True


#: The web process's gate (``None`` outside a production ASGI process: nothing to wait for).
web_gate: MigrationGate | None = None


def open_web_gate(process: str) -> MigrationGate | None:
    """Check the migrations of the web process at start (see the module docstring)."""
    global web_gate
    announce_sandbox()
    if not settings.PRODUCTION:
        return None  # the embedded database is migrated at lifespan start-up (lifespan.py)
    gate = MigrationGate(process)
    gate.check(at_start=True)
    web_gate = gate
    return gate
