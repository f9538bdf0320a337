"""What tools may do: which tools, which commands, how many calls, how long, how much output.

A ``ToolPolicy`` is an immutable value attached to a sandbox (and optionally passed to the
dispatcher); a ``CallCounter`` enforces ``max_calls`` for one run. Violations raise
``ToolPolicyViolation``, which the dispatcher reports to the model as ``policy_violation``.

The command deny list is a guard rail against obvious accidents, not a security boundary: the
sandbox's confinement (and the operator's choice of backend) is the boundary.
"""

from __future__ import annotations

import os
import shlex
import threading
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_COMMAND_DENY: tuple[str, ...] = (
    "rm -rf /",
    "shutdown",
    "reboot",
    "mkfs",
    "dd if=",
    ":(){ ",
)


DEFAULT_MAX_MEMORY_BYTES = 2 * 1024**3
DEFAULT_MAX_FILE_BYTES = 1024**3
DEFAULT_MAX_PROCESSES = 256


class ToolPolicyViolation(Exception):
    """A tool call or command that the policy does not allow."""


@dataclass(frozen=True)
class ToolPolicy:
    """Limits on tool use. ``allowed_tools=None`` allows every tool."""

    allowed_tools: frozenset[str] | None = None
    command_allow: tuple[str, ...] = ()
    command_deny: tuple[str, ...] = DEFAULT_COMMAND_DENY
    max_calls: int | None = None
    command_timeout_seconds: float = 30
    max_output_bytes: int = 64_000
    #: Whether commands may use the network. Only the ``bwrap`` backend can refuse it (a new,
    #: empty network namespace); the path-confined ``local`` fallback cannot.
    network: bool = False
    #: Per-process limits on commands (``None`` = no limit): address space, size of any file
    #: written, and processes (``bwrap`` only: without a user namespace it would count every
    #: process of the server's user). CPU time is limited to the command's timeout.
    max_memory_bytes: int | None = DEFAULT_MAX_MEMORY_BYTES
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES
    max_processes: int | None = DEFAULT_MAX_PROCESSES

    def __post_init__(self) -> None:
        if self.allowed_tools is not None and not isinstance(self.allowed_tools, frozenset):
            object.__setattr__(self, "allowed_tools", frozenset(self.allowed_tools))
        if self.max_calls is not None and self.max_calls < 0:
            raise ValueError("max_calls must be >= 0 or None")
        if self.command_timeout_seconds <= 0:
            raise ValueError("command_timeout_seconds must be positive")
        if self.max_output_bytes <= 0:
            raise ValueError("max_output_bytes must be positive")
        for name in ("max_memory_bytes", "max_file_bytes", "max_processes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value <= 0):
                raise ValueError(f"{name} must be a positive integer or None")

    def check_tool(self, name: str) -> None:
        """Raise unless the tool may be called."""
        if self.allowed_tools is not None and name not in self.allowed_tools:
            allowed = ", ".join(sorted(self.allowed_tools)) or "(none)"
            raise ToolPolicyViolation(f"tool {name!r} is not allowed; allowed tools: {allowed}")

    def check_command(self, command: str) -> None:
        """Raise if the command matches a deny pattern or its program is not on the allow list.

        Deny patterns are plain substrings, compared after collapsing runs of whitespace so
        ``rm  -rf   /`` is caught too. The allow list names programs: the command's first token
        (its basename, so ``/bin/ls`` counts as ``ls``) must be one of them.
        """
        if not command.strip():
            raise ToolPolicyViolation("empty command")
        normalized = " ".join(command.split())
        for pattern in self.command_deny:
            if pattern and " ".join(pattern.split()) in normalized:
                raise ToolPolicyViolation(f"command matches the deny pattern {pattern!r}")
        if self.command_allow:
            try:
                tokens = shlex.split(command)
            except ValueError as exc:
                raise ToolPolicyViolation(f"command cannot be parsed: {exc}") from None
            program = os.path.basename(tokens[0]) if tokens else ""
            if program not in self.command_allow:
                allowed = ", ".join(self.command_allow)
                raise ToolPolicyViolation(
                    f"program {program!r} is not on the allow list ({allowed})"
                )

    def effective_timeout(self, requested: float | None) -> float:
        """A requested timeout never exceeds the policy's."""
        if requested is None or requested <= 0:
            return self.command_timeout_seconds
        return min(requested, self.command_timeout_seconds)

    def as_json(self) -> dict[str, Any]:
        """The JSON form kept in a placement (read back by ``policy_from_placement``)."""
        data = asdict(self)
        if self.allowed_tools is not None:
            data["allowed_tools"] = sorted(self.allowed_tools)
        data["command_allow"] = list(self.command_allow)
        data["command_deny"] = list(self.command_deny)
        return data

    def new_counter(self) -> CallCounter:
        """A fresh per-run call counter enforcing ``max_calls``."""
        return CallCounter(self.max_calls)


class CallCounter:
    """Counts tool calls of one run; thread-safe so parallel tool calls count exactly."""

    def __init__(self, max_calls: int | None) -> None:
        self.max_calls = max_calls
        self._count = 0
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        with self._lock:
            return self._count

    def take(self, name: str = "") -> int:
        """Count one call and return its number; raise once the limit is used up."""
        with self._lock:
            if self.max_calls is not None and self._count >= self.max_calls:
                what = f" ({name!r})" if name else ""
                raise ToolPolicyViolation(
                    f"tool call limit reached: {self.max_calls} call(s) per run; "
                    f"this call{what} was not run"
                )
            self._count += 1
            return self._count
