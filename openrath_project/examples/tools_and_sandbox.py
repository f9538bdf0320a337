"""3. Tools and a sandbox: an agent writes and reads files in a confined workspace."""

from __future__ import annotations

import tempfile
from typing import Any

from openrath_project.examples._setup import django_ready, example_project, provider


def main(workspace: str | None = None) -> dict[str, Any]:
    django_ready()
    from openrath_project import flow

    workspace = workspace or tempfile.mkdtemp(prefix="openrath-example-ws-")
    scribe = flow.Agent(
        "You keep notes in the workspace.",
        provider(
            [
                {
                    "tool_calls": [
                        {
                            "name": "write_file",
                            "arguments": {"path": "notes.md", "content": "# Notes\n- ship it\n"},
                        }
                    ]
                },
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]},
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "../../etc/passwd"}}]},
                {"text": "Saved the notes; I may not read outside the workspace."},
            ]
        ),
        tools=["builtin"],
        name="scribe",
    )
    session = flow.Session.from_user_message("Write our notes down.", project=example_project())
    session.to("local", spec=workspace)
    session = scribe(session)
    results = [c.content for c in session.chunks if c.kind == "tool_result"]
    for result in results:
        print(result["name"], "->", result.get("error") or result["output"])
    return {"workspace": workspace, "results": results, "answer": session.text()}


if __name__ == "__main__":
    main()
