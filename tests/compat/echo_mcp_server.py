"""OpenRath's example-06 echo server, written for the mcp 2.x SDK this project pins.

OpenRath's own ``example/_shared/echo_mcp_server.py`` uses the 1.x low-level decorators
(``@server.list_tools()`` / ``@server.call_tool()`` on ``mcp.server.Server``), which the 2.x SDK
no longer has: under mcp 2.x it stops at import with ``AttributeError: 'Server' object has no
attribute 'list_tools'``. The 2.x form is ``MCPServer`` with ``@server.tool()``, as here.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("rath-demo-echo")


@server.tool()
def echo(text: str) -> str:
    """Echo the provided text back to the caller."""
    return text


@server.tool()
def refuse(reason: str) -> str:
    """Fail on purpose with the given reason."""
    raise ValueError(reason)


if __name__ == "__main__":
    server.run()
