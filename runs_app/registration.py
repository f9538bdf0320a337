"""The process's workflow registry: the product's demo modules (``OPENRATH_DEMO_WORKFLOWS``)
and the user's ``OPENRATH_WORKFLOW_MODULES``, imported once, plus anything registered
explicitly."""

from __future__ import annotations

import threading

from django.conf import settings

from runs_app.registry import WorkflowRegistry, default_registry

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
