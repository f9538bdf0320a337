"""Which backend confines a ``"local"`` placement's commands on this machine: the operator's choice.

``OPENRATH_SANDBOX`` (environment) decides:

* ``auto`` (default): ``bwrap`` when the probe finds it working, else the path-confined
  ``local`` fallback, with a WARNING saying so;
* ``bwrap``: bubblewrap is required; without it tools refuse to run commands and ``/readyz``
  reports the sandbox as failed;
* ``local``: the path-confined fallback on purpose (a WARNING says what it does not confine).

The probe runs once per process (``sandbox_status()``); the first call logs the outcome.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessions_app.sandbox.base import SandboxBackend
from sessions_app.sandbox.bwrap import BwrapSandbox, bwrap_probe
from sessions_app.sandbox.local import LocalSandbox, local_backend
from sessions_app.tools.policy import ToolPolicy

logger = logging.getLogger("sessions_app.sandbox")

SANDBOX_SETTING = "OPENRATH_SANDBOX"
SANDBOX_MODES = ("auto", "bwrap", "local")


class SandboxUnavailable(RuntimeError):
    """The operator required the bwrap sandbox and this machine cannot build it."""


def sandbox_mode(environ: Any = None) -> str:
    """The configured mode; ``ValueError`` for anything but auto, bwrap or local."""
    raw = (environ if environ is not None else os.environ).get(SANDBOX_SETTING, "")
    mode = raw.strip().lower() or "auto"
    if mode not in SANDBOX_MODES:
        raise ValueError(
            f"{SANDBOX_SETTING} must be one of {', '.join(SANDBOX_MODES)}; got {raw!r}"
        )
    return mode


@dataclass(frozen=True)
class SandboxStatus:
    """The backend in force for commands, and why."""

    mode: str
    backend: str  # "bwrap" or "local"
    ok: bool  # False only when bwrap is required and does not work
    detail: str
    bwrap: str | None = None
    disable_userns: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "backend": self.backend,
            "os_sandbox": self.backend == "bwrap",
            "ok": self.ok,
            "detail": self.detail,
        }


_status: SandboxStatus | None = None
_status_lock = threading.Lock()


def _compute_status() -> SandboxStatus:
    mode = sandbox_mode()
    if mode == "local":
        return SandboxStatus(
            mode,
            "local",
            True,
            f"{SANDBOX_SETTING}=local: commands run as the server's user, confined to the "
            "workspace by path only (no namespaces, network allowed)",
        )
    probe = bwrap_probe()
    if probe.ok:
        return SandboxStatus(
            mode,
            "bwrap",
            True,
            f"commands run in the bubblewrap sandbox ({probe.detail})",
            bwrap=probe.path,
            disable_userns=probe.disable_userns,
        )
    if mode == "bwrap":
        return SandboxStatus(
            mode,
            "local",
            False,
            f"{SANDBOX_SETTING}=bwrap but {probe.detail}: commands are refused",
        )
    return SandboxStatus(
        mode,
        "local",
        True,
        f"falling back to the path-confined local backend: {probe.detail}",
    )


def sandbox_status() -> SandboxStatus:
    """The backend in force, probed once per process; the first call logs it."""
    global _status
    with _status_lock:
        if _status is None:
            _status = _compute_status()
            if _status.backend == "bwrap":
                logger.info("tool sandbox: %s", _status.detail)
            elif _status.ok:
                logger.warning("tool sandbox: %s", _status.detail)
            else:
                logger.error("tool sandbox: %s", _status.detail)
        return _status


def reset_sandbox_status() -> None:
    """Forget the probe (tests, or after the operator installed bubblewrap)."""
    global _status
    with _status_lock:
        _status = None


def _bwrap_sandbox(path: Path, policy: ToolPolicy, status: SandboxStatus) -> BwrapSandbox:
    assert status.bwrap is not None
    return BwrapSandbox(path, policy, bwrap=status.bwrap, disable_userns=status.disable_userns)


def machine_backend(spec: str, policy: ToolPolicy) -> SandboxBackend:
    """Registry factory of ``"local"`` placements: the workspace, confined as configured."""
    status = sandbox_status()
    local = local_backend(spec, policy)
    if status.backend == "bwrap":
        return _bwrap_sandbox(Path(local.root), policy, status)
    if not status.ok:
        return RefusingSandbox(local.root, policy, status.detail)
    return local


def bwrap_backend(spec: str, policy: ToolPolicy) -> SandboxBackend:
    """Registry factory of ``"bwrap"`` placements: bubblewrap or nothing."""
    status = sandbox_status()
    local = local_backend(spec, policy)
    if status.backend != "bwrap":
        return RefusingSandbox(
            local.root, policy, f"the bwrap backend is not in force ({status.detail})"
        )
    return _bwrap_sandbox(Path(local.root), policy, status)


class RefusingSandbox(LocalSandbox):
    """The workspace's files, but no commands: bwrap is required and does not work here."""

    def __init__(self, root: str, policy: ToolPolicy, reason: str) -> None:
        super().__init__(root, policy)
        self.reason = reason

    def launch(self, argv: list[str], timeout: float) -> list[str]:
        raise SandboxUnavailable(f"tool commands are refused: {self.reason}")
