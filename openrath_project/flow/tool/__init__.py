"""OpenRath's ``rath.flow.tool``: ``FlowToolCall``, the built-in tools and the MCP adapter.

* ``FlowToolCall`` — subclass it (``name``, ``description``, ``parameters``, ``__call__(session,
  arguments)``; properties or class attributes both work) and pass instances to
  ``flow.Agent(tools=[...])``.
* ``global_system_tools()`` — OpenRath's six built-in tools by name (``run_shell_command``,
  ``read_workspace_file``, ``write_workspace_file``, ``list_workspace_files``,
  ``workspace_path_exists``, ``run_code``), a read-only mapping. Every agent's loop has them, as
  in OpenRath; they run in the session's sandbox under its policy.
* ``mcp_tools_from_server(...)`` / ``mcp_tools_from_config(...)`` — see ``mcp_adapter``.

The module itself stays callable as the ``@flow.tool`` decorator (``flow.tool`` names this
module once it is imported).

Importing this module needs no configured Django (the MCP names load on first use).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from typing import Any

from sessions_app.tools import FlowToolCall, tool
from sessions_app.tools.builtin import SYSTEM_TOOLS, ToolNameConflictError

_SYSTEM_BY_NAME: Mapping[str, FlowToolCall] = types.MappingProxyType(
    {system_tool.name: system_tool for system_tool in SYSTEM_TOOLS}
)
_MCP_NAMES = ("MCPToolCall", "mcp_tools_from_config", "mcp_tools_from_server")


def global_system_tools() -> Mapping[str, FlowToolCall]:
    """OpenRath's built-in tools, name → tool (the same objects every call; read-only)."""
    return _SYSTEM_BY_NAME


def merge_tools_for_loop(user_tools: list[FlowToolCall] | None) -> dict[str, FlowToolCall]:
    """The built-in tools plus ``user_tools``; a user tool may not reuse a built-in's name."""
    table = dict(_SYSTEM_BY_NAME)
    for user_tool in user_tools or ():
        if user_tool.name in table:
            raise ToolNameConflictError(
                f"user tool {user_tool.name!r} shadows a built-in system tool"
            )
        table[user_tool.name] = user_tool
    return table


class _ToolModule(types.ModuleType):
    """This module is also today's ``flow.tool`` decorator: once the submodule is imported,
    ``flow.tool`` names it, so calling it (``@flow.tool``, ``@flow.tool(name=...)``) decorates."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return tool(*args, **kwargs)


sys.modules[__name__].__class__ = _ToolModule


def __getattr__(name: str) -> Any:
    if name in _MCP_NAMES:
        from openrath_project.flow.tool import mcp_adapter

        return getattr(mcp_adapter, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FlowToolCall",
    "MCPToolCall",
    "ToolNameConflictError",
    "global_system_tools",
    "mcp_tools_from_config",
    "mcp_tools_from_server",
    "merge_tools_for_loop",
    "tool",
]
