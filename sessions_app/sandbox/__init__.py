"""Confined workspaces (a session's "device"): the backend interface, its registry and the
local backend, registered on import as ``"local"``."""

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
from sessions_app.sandbox.local import LocalSandbox, local_backend, stop_process_group

register_backend(LocalSandbox.name, local_backend)

__all__ = [
    "CommandResult",
    "LocalSandbox",
    "NoSandbox",
    "SandboxBackend",
    "SandboxViolation",
    "local_backend",
    "policy_from_placement",
    "register_backend",
    "registered_backends",
    "sandbox_for",
    "stop_process_group",
]
