"""Example 06: ``mcp_tools_from_server`` / ``mcp_tools_from_config`` with OpenRath's shapes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from openrath_project import flow
from openrath_project.flow.tool.mcp_adapter import (
    MCPToolCall,
    close_mcp_tools,
    mcp_tools_from_config,
    mcp_tools_from_server,
)
from tests.compat.support import call, scripted, tool_result_outputs

ECHO_SERVER = Path(__file__).with_name("echo_mcp_server.py")


@pytest.fixture
def echo_tools() -> Any:
    tools = mcp_tools_from_server([sys.executable, str(ECHO_SERVER)])
    yield tools
    close_mcp_tools(tools)


def test_example_06_discover_and_call_directly(echo_tools: Any) -> None:
    assert isinstance(echo_tools, tuple)
    assert [(t.name, t.description) for t in echo_tools] == [
        ("echo", "Echo the provided text back to the caller."),
        ("refuse", "Fail on purpose with the given reason."),
    ]
    echo = echo_tools[0]
    assert isinstance(echo, MCPToolCall)
    assert echo.parameters["required"] == ["text"]
    assert echo.parameters["properties"]["text"]["type"] == "string"
    # MCP tools ignore the session argument (OpenRath's example passes a throwaway one).
    assert echo(None, {"text": "hello from mcp"}) == {"text": "hello from mcp"}


def test_a_server_side_tool_error_is_returned_as_text_not_raised(echo_tools: Any) -> None:
    refuse = echo_tools[1]

    result = refuse(None, {"reason": "not today"})

    # The server's own error text (this SDK's server does not pass the exception message on).
    assert result == {"text": "Error executing tool refuse", "is_error": True}


@pytest.mark.django_db
def test_the_agent_loop_gets_both_answers_as_tool_results(echo_tools: Any, project: Any) -> None:
    provider = scripted(
        {
            "tool_calls": [
                call("c1", "echo", text="ping"),
                call("c2", "refuse", reason="no"),
            ]
        },
        {"text": "Echoed; the other refused."},
    )
    session = flow.Session.from_user_message("Use MCP.", project=project)

    session = flow.Agent("Use the MCP tools.", provider, tools=list(echo_tools))(session)

    echoed, refused = tool_result_outputs(session)
    assert echoed == {"text": "ping"}
    assert refused == {"text": "Error executing tool refuse", "is_error": True}
    assert session.text() == "Echoed; the other refused."


def test_from_config_reads_openraths_mcp_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENRATH_HOME", str(tmp_path))
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "version": 1,
                "mcp": {
                    "default_enabled": ["echo"],
                    "servers": {"echo": {"command": [sys.executable, str(ECHO_SERVER)]}},
                },
            }
        )
    )
    tools = mcp_tools_from_config()
    try:
        assert [t.name for t in tools] == ["echo", "refuse"]
        assert tools[0](None, {"text": "via config"}) == {"text": "via config"}
    finally:
        close_mcp_tools(tools)
    with pytest.raises(KeyError, match="MCP server 'nope' not found"):
        mcp_tools_from_config("nope")


def test_openraths_v1_echo_server_does_not_start_under_mcp_2(tmp_path: Path) -> None:
    # What example 06's own server does under this project's SDK (see echo_mcp_server.py).
    import subprocess

    script = tmp_path / "v1_server.py"
    script.write_text(
        "from mcp.server import Server\n"
        "server = Server('v1')\n"
        "@server.list_tools()\n"
        "async def tools():\n"
        "    return []\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "AttributeError: 'Server' object has no attribute 'list_tools'" in done.stderr
