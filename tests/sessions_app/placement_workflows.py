"""A workflow that runs the built-in file and shell tools on ``ctx.session`` without placing it
(relying on whatever placement the run's session has): the shape issue 14 item 2 abused."""

from __future__ import annotations

from openrath_project import flow
from sessions_app.providers.base import ToolCallRequest
from sessions_app.tools import BUILTIN_TOOLS, dispatch_tool

TOOLS = {tool.name: tool for tool in BUILTIN_TOOLS}


class ToolsOnSession(flow.Workflow):
    name = "tools_on_session"
    description = "write a file and run a command in the run session's sandbox, as placed"

    @flow.step(entry=True, effects="none")
    def work(self, state, ctx):
        calls = [
            ToolCallRequest(
                id="w", name="write_file", arguments='{"path": "pwned.txt", "content": "x"}'
            ),
            ToolCallRequest(id="s", name="run_shell", arguments='{"command": "ls -a; touch ran"}'),
        ]
        outcomes = [dispatch_tool(TOOLS, ctx.session, call) for call in calls]
        return {
            **state,
            "placement": ctx.session.placement,
            "errors": [outcome.error for outcome in outcomes],
        }
