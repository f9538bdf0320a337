"""The sandbox interface (a session's "device") and the registry that maps placements to backends.

A session's placement is a JSON dict, ``{"backend": "local", "spec": "<workspace path>"}`` with
an optional ``"policy"`` object (``ToolPolicy`` fields); ``sandbox_for(placement)`` builds the
backend it names. Backends confine file access to their workspace and run commands under the
policy's limits.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sessions_app.tools.policy import ToolPolicy, ToolPolicyViolation


class SandboxViolation(ToolPolicyViolation):
    """A path outside the workspace, or a file operation the sandbox refuses."""


class NoSandbox(Exception):
    """The session has no placement, so tools have nowhere to run."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or "session has no sandbox: call session.to('local', spec=...)")


@dataclass(frozen=True)
class CommandResult:
    """How a command ended and what it printed (each stream capped)."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    elapsed_ms: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SandboxBackend(ABC):
    """A confined workspace with files and commands. Paths are relative to the workspace root."""

    name: str
    policy: ToolPolicy

    @abstractmethod
    def read_file(self, path: str, *, max_bytes: int | None = None) -> str:
        """The file's text (UTF-8, undecodable bytes replaced), at most ``max_bytes`` of it."""

    @abstractmethod
    def file_size(self, path: str) -> int:
        """The file's size in bytes."""

    @abstractmethod
    def write_file(self, path: str, content: str) -> int:
        """Create or replace the file (and missing parent directories); bytes written."""

    @abstractmethod
    def list_dir(self, path: str = ".") -> list[dict[str, Any]]:
        """Entries ``{"name", "type", "size"}`` sorted by name; type is file, dir, symlink or
        other."""

    @abstractmethod
    def run_shell(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run a shell command in the workspace."""

    @abstractmethod
    def run_python(self, code: str, timeout: float | None = None) -> CommandResult:
        """Run Python code in the workspace."""


SandboxFactory = Callable[[str, ToolPolicy], SandboxBackend]

_backends: dict[str, SandboxFactory] = {}
_backends_lock = threading.Lock()


def register_backend(name: str, factory: SandboxFactory) -> None:
    """Make placements with ``"backend": name`` build ``factory(spec, policy)``."""
    if not name or not name.strip():
        raise ValueError("a sandbox backend name must be a non-empty string")
    with _backends_lock:
        _backends[name] = factory


def registered_backends() -> tuple[str, ...]:
    with _backends_lock:
        return tuple(sorted(_backends))


def policy_from_placement(raw: Mapping[str, Any] | None) -> ToolPolicy:
    """A ``ToolPolicy`` from the JSON form stored in a placement (lists become tuples/sets)."""
    if not raw:
        return ToolPolicy()
    if not isinstance(raw, Mapping):
        raise ValueError("placement 'policy' must be an object")
    fields = dict(raw)
    known = set(ToolPolicy.__dataclass_fields__)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"placement 'policy' has unknown keys: {', '.join(unknown)}")
    if fields.get("allowed_tools") is not None:
        fields["allowed_tools"] = frozenset(fields["allowed_tools"])
    for key in ("command_allow", "command_deny"):
        if key in fields:
            fields[key] = tuple(fields[key])
    return ToolPolicy(**fields)


def sandbox_for(placement: Mapping[str, Any] | None) -> SandboxBackend:
    """The sandbox a placement names; ``NoSandbox`` when there is none."""
    if not placement:
        raise NoSandbox()
    if not isinstance(placement, Mapping):
        raise ValueError(f"placement must be an object, got {type(placement).__name__}")
    backend = placement.get("backend")
    spec = placement.get("spec")
    with _backends_lock:
        factory = _backends.get(str(backend))
    if factory is None:
        known = ", ".join(registered_backends()) or "(none)"
        raise ValueError(f"unknown sandbox backend {backend!r}; known backends: {known}")
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"placement for backend {backend!r} needs a non-empty 'spec' string")
    return factory(spec, policy_from_placement(placement.get("policy")))
