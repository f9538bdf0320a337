"""A tiny stdio MCP server for the MCP example: ``lookup(word)`` from a small glossary."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

GLOSSARY = {
    "fork": "a copy-on-write branch of a session",
    "lease": "a worker's time-limited hold on a run, fenced by a token",
}

server = MCPServer("openrath-example-glossary")


@server.tool()
def lookup(word: str) -> str:
    """Look a word up in the OpenRath glossary."""
    return GLOSSARY.get(word.lower(), "not in the glossary")


if __name__ == "__main__":
    server.run()
