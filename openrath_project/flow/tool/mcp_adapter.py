"""OpenRath's ``rath.flow.tool.mcp_adapter``: MCP servers' tools as a tuple of tools.

``mcp_tools_from_server(["python", "server.py"])`` (or ``("python", args=["server.py"])``)
starts the stdio server with ``sessions_app.mcp`` — the same adapter as ``flow.mcp_tools`` — and
returns its tools as a tuple. Results come back as OpenRath shapes them: the text parts of the
answer joined as ``{"text": ...}``; with no content, the structured content or ``{"ok": True}``;
other content as ``{"content": [...]}``. A tool error reported by the server is **returned** to
the model the same way (``{"text": <the server's message>, "is_error": True}``), not raised.
Transport failures (the server exited, a call timed out) still raise, and the agent loop turns
them into a tool error for the model.

Different from OpenRath, on purpose: OpenRath starts a fresh server process for every call;
here the server keeps running (its state survives between calls, and a call costs no start-up).
It is stopped when the program exits, or by ``close_mcp_tools(tools)``.

``mcp_tools_from_config(name=None)`` reads the server from ``mcp.servers`` in OpenRath's
``config.json`` (``sessions_app.providers.openrath_config``); with no name, the single entry of
``mcp.default_enabled``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import mcp_types

from sessions_app.mcp import MCPTool, MCPToolset, mcp_tools
from sessions_app.providers.openrath_config import load_openrath_config
from sessions_app.tools import FlowToolCall

__all__ = [
    "MCPToolCall",
    "close_mcp_tools",
    "flatten_call_result",
    "mcp_tools_from_config",
    "mcp_tools_from_server",
]


def flatten_call_result(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """A ``CallToolResult`` in OpenRath's shape (see the module docstring)."""
    content = result.content or []
    if not content:
        shaped: dict[str, Any] = (
            dict(result.structured_content) if result.structured_content else {"ok": True}
        )
    else:
        texts = [block.text for block in content if isinstance(block, mcp_types.TextContent)]
        if texts:
            shaped = {"text": "\n".join(texts)}
        else:
            shaped = {
                "content": [
                    block.model_dump(mode="json", by_alias=True, exclude_none=True)
                    for block in content
                ]
            }
    if result.is_error:
        shaped["is_error"] = True
    return shaped


class MCPToolCall(FlowToolCall):
    """One MCP tool with OpenRath's result shapes; the session argument is not used."""

    def __init__(self, tool: MCPTool) -> None:
        self.mcp_tool = tool
        self.toolset: MCPToolset = tool.toolset
        self.name = tool.name
        self.description = tool.description
        self.parameters = tool.parameters
        self.writes = tool.writes

    def __call__(self, session: Any, arguments: Mapping[str, Any]) -> Any:
        return flatten_call_result(self.toolset.call(self.name, dict(arguments), raw=True))


def mcp_tools_from_server(
    command: str | list[str],
    *,
    args: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> tuple[MCPToolCall, ...]:
    """Start a stdio MCP server and return its tools (they share the one running server)."""
    if isinstance(command, str):
        argv = [command, *(args or [])]
    else:
        if args:
            raise TypeError("pass the arguments in the command list or in args=, not both")
        argv = list(command)
    toolset = mcp_tools(argv, env=dict(env) if env is not None else None, cwd=cwd)
    return tuple(MCPToolCall(t) for t in toolset)


def mcp_tools_from_config(
    name: str | None = None, *, config_path: str | os.PathLike[str] | None = None
) -> tuple[MCPToolCall, ...]:
    """The tools of the MCP server ``name`` of ``config.json`` (default: the only enabled one)."""
    config = load_openrath_config(config_path)
    if name is None:
        enabled = config.mcp_default_enabled
        if len(enabled) != 1:
            raise KeyError(
                "mcp_tools_from_config() needs a server name: mcp.default_enabled lists "
                f"{len(enabled)} server(s) {list(enabled)}"
            )
        name = enabled[0]
    entry = config.mcp_server(name)
    return mcp_tools_from_server(list(entry.command), env=entry.env or None)


def close_mcp_tools(tools: Iterable[FlowToolCall]) -> None:
    """Stop the servers behind ``tools`` (each once); other tools are left alone."""
    seen: set[int] = set()
    for item in tools:
        toolset = getattr(item, "toolset", None)
        if isinstance(toolset, MCPToolset) and id(toolset) not in seen:
            seen.add(id(toolset))
            toolset.close()
