"""OpenRath's example 04 (built-in tools in every loop), imports changed, scripted model.

The scripted model writes a file into the directory the session is placed in (``spec="."``,
the script's working directory), reads it back and counts its lines with a shell command; the
script prints the tool names, the streamed answer and each tool's result as the model saw it.
"""

import json
import sys

from openrath_project import flow
from openrath_project.flow.tool import global_system_tools
from openrath_project.session import Session

print("tools in every loop:", ", ".join(sorted(global_system_tools())))

model = flow.Provider(
    "scripted",
    fixture=[
        {
            "tool_calls": [
                {
                    "name": "write_workspace_file",
                    "arguments": {"path": "notes.txt", "content": "hello from openrath\n"},
                }
            ]
        },
        {"tool_calls": [{"name": "read_workspace_file", "arguments": {"path": "notes.txt"}}]},
        {"tool_calls": [{"name": "run_shell_command", "arguments": {"cmd": "wc -l notes.txt"}}]},
        {"text": "Wrote, read and counted notes.txt."},
    ],
)
agent = flow.Agent(
    "Use the built-in tools.",
    model,
    on_event=lambda d: d.content_delta and sys.stdout.write(d.content_delta),
)
out = agent(Session.from_user_message("Write notes.txt, read it, count it.").to("local", spec="."))
print()
for row in out.chunk_table.rows:
    if row.kind == "tool_result":
        result = json.loads(row.payload["content"])
        shown = {
            k: result[k] for k in ("bytes_written", "data", "exit_code", "stdout") if k in result
        }
        print(row.payload["name"], shown)
