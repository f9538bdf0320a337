"""OpenRath's ``rath.backend`` for scripts: ``import openrath_project.backend as backend``.

``backend.get("local").is_available()``, ``list_names()``, ``open(spec)`` over the product's
sandbox registry (``sessions_app.sandbox``): ``local`` (a workspace on this machine, commands in
bubblewrap where it works, else path-confined, as ``OPENRATH_SANDBOX`` says) and ``bwrap``
(bubblewrap or refusal). There is no OpenSandbox backend. Pure Python: sandboxes need no
database. See docs/migrating-from-openrath.md.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

from openrath_project.compat import missing_name
from sessions_app.sandbox import CommandResult, SandboxBackend, registered_backends, sandbox_for
from sessions_app.sandbox.select import sandbox_status
from sessions_app.tools.policy import ToolPolicy

__all__ = [
    "Backend",
    "BackendError",
    "BackendNotFound",
    "BackendSandbox",
    "BackendSandboxSpec",
    "CommandResult",
    "current",
    "get",
    "is_available",
    "list_names",
    "preferred",
]

#: A sandbox handle: what ``Backend.open`` returns and ``session.bind_sandbox`` takes.
BackendSandbox = SandboxBackend


class BackendError(RuntimeError):
    """A sandbox backend problem."""


class BackendNotFound(BackendError, KeyError):
    """No backend of that name is registered."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "backend not found"


@dataclass(frozen=True)
class BackendSandboxSpec:
    """Where a sandbox works: ``working_dir`` (``None``: a fresh temporary directory)."""

    working_dir: str | None = None


@dataclass(frozen=True)
class Backend:
    """A registered backend by name."""

    name: str

    def is_available(self) -> bool:
        """Whether tools can run commands on it on this machine (``local`` always can, unless
        the operator required bubblewrap and it does not work; ``bwrap`` when it works)."""
        status = sandbox_status()
        if self.name == "bwrap":
            return status.backend == "bwrap"
        return status.ok

    def open(
        self, spec: BackendSandboxSpec | str | None = None, *, policy: ToolPolicy | None = None
    ) -> SandboxBackend:
        """A sandbox on this backend in ``spec``'s directory (a new temporary one for ``None``)."""
        working_dir = spec.working_dir if isinstance(spec, BackendSandboxSpec) else spec
        if working_dir is None:
            working_dir = tempfile.mkdtemp(prefix="openrath-sandbox-")
        placement: dict[str, Any] = {"backend": self.name, "spec": str(working_dir)}
        if policy is not None:
            placement["policy"] = policy.as_json()
        return sandbox_for(placement)


def list_names() -> list[str]:
    return list(registered_backends())


def get(name: str) -> Backend:
    if name not in registered_backends():
        raise BackendNotFound(
            f"no sandbox backend {name!r}; known backends: {', '.join(registered_backends())}"
        )
    return Backend(name)


def is_available(name: str) -> bool:
    return name in registered_backends() and get(name).is_available()


def preferred() -> str:
    """The backend sessions are placed on by default: ``local``."""
    return "local"


def current() -> Backend:
    return get(preferred())


def __getattr__(name: str) -> Any:
    raise missing_name(__name__, name)
