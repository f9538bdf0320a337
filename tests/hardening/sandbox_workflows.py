"""A workflow that does what the red team did from a tool (issue 14, item 7): read the
worker's environment through ``/proc`` and reach its database and Redis, with the built-in
``run_shell`` and ``run_python`` tools on the run's session, placed by the workflow."""

from __future__ import annotations

import json

from openrath_project import flow
from sessions_app.providers.base import ToolCallRequest
from sessions_app.tools import BUILTIN_TOOLS, dispatch_tool

TOOLS = {tool.name: tool for tool in BUILTIN_TOOLS}

SHELL = (
    "tr '\\0' '\\n' < /proc/$PPID/environ; echo ---; tr '\\0' '\\n' < /proc/1/environ; "
    "echo ---; ls /proc | grep -c '^[0-9]'"
)
PYTHON = (
    "import os, socket\n"
    "print(open(f'/proc/{os.getppid()}/environ').read().replace(chr(0), chr(10)))\n"
    "for port in (5432, 6379):\n"
    "    s = socket.socket(); s.settimeout(3)\n"
    "    print('port', port, s.connect_ex(('127.0.0.1', port)))\n"
)


class SandboxSecrets(flow.Workflow):
    name = "sandbox_secrets"
    description = "read the worker's environment and network from run_shell and run_python"

    @flow.step(entry=True, effects="none")
    def probe(self, state, ctx):
        session = ctx.session.to("local", spec="probe")
        calls = [
            ToolCallRequest(id="s", name="run_shell", arguments=json.dumps({"command": SHELL})),
            ToolCallRequest(id="p", name="run_python", arguments=json.dumps({"code": PYTHON})),
        ]
        outcomes = [dispatch_tool(TOOLS, session, call) for call in calls]
        return {
            **state,
            "outputs": [outcome.output for outcome in outcomes],
            "errors": [outcome.error for outcome in outcomes],
        }
