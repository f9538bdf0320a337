"""OpenRath's example 06 (tools of an MCP server), imports changed; no model.

OpenRath's echo server is written for the mcp 1.x SDK; under the 2.x SDK this project pins it
cannot start, so this runs the same server written for 2.x (``tests/compat/echo_mcp_server.py``).
The script lists the discovered tools and calls ``echo`` and the failing ``refuse`` directly.
"""

import sys
from pathlib import Path

from openrath_project.flow.tool.mcp_adapter import mcp_tools_from_server
from openrath_project.session import Session

server = Path(__file__).resolve().parent.parent / "echo_mcp_server.py"
tools = mcp_tools_from_server([sys.executable, str(server)])
print(f"{len(tools)} tools:", ", ".join(f"{t.name} ({t.description})" for t in tools))
by_name = {t.name: t for t in tools}
print("echo takes:", sorted(by_name["echo"].parameters["properties"]))
scratch = Session.from_user_message("not used by MCP tools")
print("echo ->", by_name["echo"](scratch, {"text": "hello from mcp"}))
# A server-side failure comes back as text for the model, flagged, not as an exception.
print("refuse ->", by_name["refuse"](scratch, {"reason": "no thanks"}))
