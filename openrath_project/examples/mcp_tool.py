"""5. MCP tools: a stdio MCP server's tools, used by an agent like any other tool."""

from __future__ import annotations

import sys
from typing import Any

from openrath_project.examples._setup import django_ready, example_project, provider


def main() -> dict[str, Any]:
    django_ready()
    from openrath_project import flow

    with flow.mcp_tools([sys.executable, "-m", "openrath_project.examples.mcp_server"]) as tools:
        names = sorted(tool.name for tool in tools)
        explainer = flow.Agent(
            "You explain OpenRath words.",
            provider(
                [
                    {"tool_calls": [{"name": "lookup", "arguments": {"word": "lease"}}]},
                    {"text": "A lease is a worker's fenced, time-limited hold on a run."},
                ]
            ),
            tools=list(tools),
            name="explainer",
        )
        session = flow.Session.from_user_message("What is a lease?", project=example_project())
        session = explainer(session)
    result = next(c.content for c in session.chunks if c.kind == "tool_result")
    print(names, result["output"])
    return {"tools": names, "output": result["output"], "answer": session.text()}


if __name__ == "__main__":
    main()
