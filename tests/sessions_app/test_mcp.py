"""``mcp_tools``: a real stdio MCP server (tests/sessions_app/mcp_server_fixture.py) end to end."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessions_app.mcp import (
    MCPStartupError,
    MCPToolset,
    MCPToolTimeout,
    mcp_tools,
)
from sessions_app.providers import ToolCallRequest
from sessions_app.tools import FlowToolCall, ToolOutcome, dispatch_tool

FIXTURE = str(Path(__file__).with_name("mcp_server_fixture.py"))
COMMAND = [sys.executable, FIXTURE]
#: The time limits of the tests that do not test a time limit: far beyond what any call here takes,
#: even on a loaded machine (a tight limit made an ordinary tool error a ``tool_timeout``).
GENEROUS = 60


class FakeSession:
    id = "s-1"
    placement = None


def gone(pid: int) -> bool:
    """Exited and reaped: no /proc entry at all (a zombie would still have one)."""
    return not os.path.exists(f"/proc/{pid}")


def children_of_this_process() -> list[int]:
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            if data[data.rfind(b")") + 2 :].split()[1].decode() == me:
                found.append(int(entry))
    return found


def call(toolset: MCPToolset, name: str, arguments: str) -> ToolOutcome:
    tools = {t.name: t for t in toolset}
    return dispatch_tool(
        tools, FakeSession(), ToolCallRequest(id="c", name=name, arguments=arguments)
    )


@pytest.fixture(scope="module")
def toolset() -> Iterator[MCPToolset]:
    with mcp_tools(COMMAND, startup_timeout=GENEROUS, call_timeout=GENEROUS) as running:
        yield running


def test_lists_the_servers_tools(toolset: MCPToolset) -> None:
    assert [t.name for t in toolset] == ["add", "fail", "crash", "hang"]
    add = toolset.tools[0]
    assert isinstance(add, FlowToolCall)
    assert add.writes is True
    assert add.schema() == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"title": "A", "type": "integer"},
                    "b": {"title": "B", "type": "integer"},
                },
                "required": ["a", "b"],
                "title": "addArguments",
            },
        },
    }


def test_call_add(toolset: MCPToolset) -> None:
    assert call(toolset, "add", '{"a": 2, "b": 40}') == ToolOutcome(
        output={"result": 42}, error=None, error_kind=None, truncated=False
    )


def test_arguments_are_validated_before_reaching_the_server(toolset: MCPToolset) -> None:
    assert call(toolset, "add", '{"a": "two", "b": 1}') == ToolOutcome(
        output=None,
        error="invalid arguments for tool 'add': at 'a': 'two' is not of type 'integer'",
        error_kind="invalid_tool_arguments",
        truncated=False,
    )


def test_tool_error_from_the_server(toolset: MCPToolset) -> None:
    outcome = call(toolset, "fail", '{"message": "nope"}')
    assert outcome.error_kind == "tool_execution_exception"
    assert outcome.error == "MCPToolError: MCP tool 'fail' failed: Error executing tool fail"


def test_hang_is_a_timeout_and_the_server_stays_usable(toolset: MCPToolset) -> None:
    # ``hang`` never answers, so only the 1 s limit can end the call; the upper bound only
    # says that this limit, not the fixture's GENEROUS one, ended it.
    toolset.call_timeout = 1
    try:
        started = time.monotonic()
        outcome = call(toolset, "hang", "{}")
        elapsed = time.monotonic() - started
    finally:
        toolset.call_timeout = GENEROUS
    assert outcome == ToolOutcome(
        output=None,
        error="MCPToolTimeout: MCP tool 'hang' did not answer within 1s",
        error_kind="tool_timeout",
        truncated=False,
    )
    assert 1 <= elapsed < GENEROUS / 2
    assert call(toolset, "add", '{"a": 1, "b": 1}').output == {"result": 2}


def test_crash_gives_a_clear_error_with_the_exit_code() -> None:
    with mcp_tools(COMMAND, startup_timeout=GENEROUS, call_timeout=GENEROUS) as toolset:
        label = " ".join(COMMAND)
        expected = f"MCPServerExited: the MCP server {label} exited with exit code 3"
        first = call(toolset, "crash", "{}")
        later = call(toolset, "add", '{"a": 1, "b": 2}')
        pid = toolset.pid
    assert first == ToolOutcome(
        output=None, error=expected, error_kind="tool_execution_exception", truncated=False
    )
    assert later.error == expected
    assert pid is not None
    assert gone(pid)


def test_close_stops_the_server_and_leaves_no_child_process() -> None:
    before = set(children_of_this_process())
    toolset = mcp_tools(COMMAND, startup_timeout=GENEROUS)
    pid = toolset.pid
    assert pid is not None
    assert pid in children_of_this_process()
    # A call still hanging on the server must not keep it alive past close().
    toolset.call_timeout = 0.2
    with pytest.raises(MCPToolTimeout):
        toolset.call("hang", {})

    started = time.monotonic()
    toolset.close()
    toolset.close()

    # Bounded by close()'s own limits (stdin grace, SIGTERM grace, reap), not by the hung call;
    # the margin is for a loaded machine.
    assert time.monotonic() - started < 30
    assert gone(pid)
    assert set(children_of_this_process()) == before
    assert not toolset._thread.is_alive()
    with pytest.raises(Exception, match="is closed"):
        toolset.call("add", {"a": 1, "b": 2})


def test_a_server_that_exits_at_startup() -> None:
    command = [
        sys.executable,
        "-c",
        "import sys; print('bad config', file=sys.stderr); sys.exit(5)",
    ]
    with pytest.raises(MCPStartupError) as caught:
        mcp_tools(command, startup_timeout=GENEROUS)
    assert str(caught.value).startswith(
        f"MCP server {' '.join(command)} exited with exit code 5 during startup"
    )
    assert "bad config" in str(caught.value)


def test_a_server_that_never_answers_at_startup() -> None:
    before = set(children_of_this_process())
    command = [sys.executable, "-c", "import time; time.sleep(3600)"]
    started = time.monotonic()
    with pytest.raises(MCPStartupError) as caught:
        mcp_tools(command, startup_timeout=1)
    assert str(caught.value) == f"MCP server {' '.join(command)} did not start within 1s"
    # The server never answers (it sleeps an hour): only the 1 s limit can end the wait; the upper
    # bound (start-up limit + close()'s own limits + load margin) says nothing else ended it.
    assert 1 <= time.monotonic() - started < 45
    assert set(children_of_this_process()) == before


def test_a_missing_executable() -> None:
    with pytest.raises(MCPStartupError, match="cannot start MCP server /no/such/server"):
        mcp_tools(["/no/such/server"])


def test_the_server_does_not_inherit_secrets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-mcp")
    script = tmp_path / "env_server.py"
    script.write_text(
        "import os\n"
        "from mcp.server.mcpserver import MCPServer\n"
        "server = MCPServer('env')\n"
        "@server.tool()\n"
        "def env_names() -> list[str]:\n"
        "    '''Names of the environment variables.'''\n"
        "    return sorted(os.environ)\n"
        "server.run()\n"
    )
    with mcp_tools(
        [sys.executable, str(script)],
        env={"EXTRA": "1"},
        startup_timeout=GENEROUS,
        call_timeout=GENEROUS,
    ) as toolset:
        names = toolset.call("env_names", {})
    assert "OPENAI_API_KEY" not in names["result"]
    assert "EXTRA" in names["result"]
