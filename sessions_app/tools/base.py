"""``FlowToolCall``: a tool's JSON schema and its Python behaviour in one object.

A tool is called as ``tool(session, arguments)`` with arguments the dispatcher has already
parsed and validated against ``parameters``; the session gives it its sandbox (placement) and
identity. Tools that change the world set ``writes = True`` so the effect ledger can wrap them.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any

#: What OpenAI-compatible APIs accept as a function name.
TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEFAULT_MAX_OUTPUT_CHARS = 16_000


def empty_parameters() -> dict[str, Any]:
    """The schema of a tool that takes no arguments."""
    return {"type": "object", "properties": {}, "additionalProperties": False}


class FlowToolCall(ABC):
    """A tool the model can call. Subclasses set the attributes and implement ``__call__``."""

    name: str
    description: str = ""
    parameters: dict[str, Any]
    writes: bool = False
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    #: OpenRath's scheduling hints; kept for source compatibility (calls here run in order).
    parallel_safe: bool = False

    @abstractmethod
    def __call__(self, session: Any, arguments: dict[str, Any]) -> Any:
        """Run the tool; the result should be JSON-serialisable (anything else is ``str()``-ed)."""

    def resource_key(self, arguments: Any) -> tuple[str, ...]:
        """OpenRath's hint naming what a call touches (calls here run in transcript order)."""
        return ("global",) if not self.parallel_safe else (self.name,)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool definition sent to the model."""
        # OpenRath tools may define these as properties returning a Mapping or None.
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description or "",
                "parameters": dict(self.parameters),
            },
        }

    def __repr__(self) -> str:
        flags = " writes" if self.writes else ""
        return f"<{type(self).__name__} {getattr(self, 'name', '?')!r}{flags}>"


def check_tool_name(name: str) -> str:
    """``name`` if a model API will accept it as a function name, else ``ValueError``."""
    if not TOOL_NAME_PATTERN.match(name):
        raise ValueError(
            f"tool name {name!r} must be 1-64 characters of letters, digits, '_' or '-'"
        )
    return name
