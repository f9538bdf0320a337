"""A tiny stdio MCP server for the MCP adapter tests: ``add``, ``fail``, ``crash`` and ``hang``."""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("openrath-test-fixture")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(message: str) -> str:
    """Raise an error with the given message."""
    raise ValueError(message)


@server.tool()
def crash() -> str:
    """Exit the server process at once with exit code 3."""
    os._exit(3)


@server.tool()
def hang() -> str:
    """Never answer."""
    time.sleep(3600)
    return "unreachable"


if __name__ == "__main__":
    server.run()
