"""Confined workspaces (a session's "device"): the backend interface, its registry, the
path-confined local backend and the bubblewrap OS sandbox.

Registered on import: ``"local"`` (a workspace on this machine; its commands run in bubblewrap
where it works, else path-confined, as ``OPENRATH_SANDBOX`` decides: see ``select``) and
``"bwrap"`` (bubblewrap or refusal).
"""

from __future__ import annotations

from sessions_app.sandbox.base import (
    CommandResult,
    NoSandbox,
    SandboxBackend,
    SandboxViolation,
    policy_from_placement,
    register_backend,
    registered_backends,
    sandbox_for,
)
from sessions_app.sandbox.bwrap import BwrapSandbox, bwrap_probe
from sessions_app.sandbox.local import LocalSandbox, local_backend, stop_process_group
from sessions_app.sandbox.select import (
    SandboxStatus,
    SandboxUnavailable,
    bwrap_backend,
    machine_backend,
    reset_sandbox_status,
    sandbox_mode,
    sandbox_status,
)

register_backend(LocalSandbox.name, machine_backend)
register_backend(BwrapSandbox.name, bwrap_backend)

__all__ = [
    "BwrapSandbox",
    "CommandResult",
    "LocalSandbox",
    "NoSandbox",
    "SandboxBackend",
    "SandboxStatus",
    "SandboxUnavailable",
    "SandboxViolation",
    "bwrap_backend",
    "bwrap_probe",
    "local_backend",
    "machine_backend",
    "policy_from_placement",
    "register_backend",
    "registered_backends",
    "reset_sandbox_status",
    "sandbox_for",
    "sandbox_mode",
    "sandbox_status",
    "stop_process_group",
]
