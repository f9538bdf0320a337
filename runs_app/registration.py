"""The process's workflow registry: the product's demo modules (``OPENRATH_DEMO_WORKFLOWS``)
and the user's ``OPENRATH_WORKFLOW_MODULES``, imported once, plus anything registered
explicitly.

A module that cannot be imported (or a workflow that does not compile) is a
:class:`~runs_app.registry.RegistryError` naming it and the fix. Every long-running process
checks this at start (:func:`workflow_modules_problem`, ``openrath_project.startup``) and
refuses to start on it with that one line, so no worker loops on it; a process that did not
check (an ASGI server without the lifespan protocol) reports it on ``/readyz``. Until the
modules import, each use tries again (nothing is registered from a failed discovery).
"""

from __future__ import annotations

import threading

from django.conf import settings

from runs_app.registry import RegistryError, WorkflowRegistry, default_registry

_lock = threading.Lock()
_discovered = False


def workflows() -> WorkflowRegistry:
    """The default registry, with the configured modules discovered on first use."""
    global _discovered
    if not _discovered:
        with _lock:
            if not _discovered:
                modules = [
                    m
                    for m in [
                        *settings.OPENRATH_DEMO_WORKFLOW_MODULES,
                        *settings.OPENRATH_WORKFLOW_MODULES,
                    ]
                    if m.strip()
                ]
                if modules:
                    default_registry.discover(modules)
                _discovered = True
    return default_registry


def workflow_modules_problem() -> str | None:
    """Why this process's workflow modules cannot be registered, in one line; ``None`` when
    they can (it discovers them, as the first use would)."""
    try:
        workflows()
    except RegistryError as exc:
        return " ".join(str(exc).split())
    return None
