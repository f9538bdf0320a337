"""OpenRath's built-in tools: its names and arguments, in every agent loop, under the policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from openrath_project import flow
from openrath_project.flow.tool import (
    ToolNameConflictError,
    global_system_tools,
    merge_tools_for_loop,
)
from sessions_app.tools import ToolPolicy
from tests.compat.support import call, scripted, tool_result_outputs

pytestmark = pytest.mark.django_db

OPENRATH_TOOLS = {
    "list_workspace_files": ["path"],
    "read_workspace_file": ["encoding", "path"],
    "run_code": ["code", "language", "timeout"],
    "run_shell_command": ["cmd"],
    "workspace_path_exists": ["path"],
    "write_workspace_file": ["content", "path"],
}


def test_global_system_tools_are_openraths_six_with_its_argument_names() -> None:
    tools = global_system_tools()

    assert sorted(tools) == sorted(OPENRATH_TOOLS)
    assert {name: sorted(t.parameters["properties"]) for name, t in tools.items()} == (
        OPENRATH_TOOLS
    )
    assert {name: t.parameters["required"] for name, t in tools.items()} == {
        "list_workspace_files": ["path"],
        "read_workspace_file": ["path"],
        "run_code": ["code"],
        "run_shell_command": ["cmd"],
        "workspace_path_exists": ["path"],
        "write_workspace_file": ["path", "content"],
    }
    assert global_system_tools() is tools  # one registry, read-only
    with pytest.raises(TypeError):
        tools["x"] = tools["run_code"]  # type: ignore[index]
    assert [t.name for t in tools.values() if t.writes] == [
        "run_shell_command",
        "write_workspace_file",
        "run_code",
    ]


def test_example_04_write_read_and_count_lines_with_no_tool_wiring(
    project: Any, tmp_path: Path
) -> None:
    # OpenRath's example 04: the agent gets no tools= at all and still has the built-ins.
    provider = scripted(
        {
            "tool_calls": [
                call(
                    "c1", "write_workspace_file", path="notes.txt", content="hello from openrath\n"
                )
            ]
        },
        {"tool_calls": [call("c2", "read_workspace_file", path="notes.txt")]},
        {"tool_calls": [call("c3", "run_shell_command", cmd="wc -l notes.txt")]},
        {"text": "Wrote, read back and counted 1 line."},
    )
    agent = flow.Agent("You are a file-savvy assistant.", provider)
    user = flow.Session.from_user_message(
        "Write notes.txt, read it, count its lines.", project=project
    ).to("local", spec=str(tmp_path))

    user = agent(user)

    write, read, shell = tool_result_outputs(user)
    assert write == {"bytes_written": 20}
    assert read == {"data": "hello from openrath\n", "size": 20, "truncated": False}
    assert (shell["exit_code"], shell["stdout"].split()) == (0, ["1", "notes.txt"])
    assert (tmp_path / "notes.txt").read_text() == "hello from openrath\n"
    assert user.text() == "Wrote, read back and counted 1 line."
    assert sorted(t["function"]["name"] for t in agent.tool_schemas()) == sorted(OPENRATH_TOOLS)


def test_listing_existence_and_code(project: Any, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n")
    provider = scripted(
        {
            "tool_calls": [
                call("c1", "list_workspace_files", path="docs"),
                call("c2", "workspace_path_exists", path="docs/a.md"),
                call("c3", "workspace_path_exists", path="docs/missing.md"),
                call("c4", "run_code", code="print(6 * 7)"),
                call("c5", "run_code", code="1", language="ruby"),
                call("c6", "run_shell_command", cmd="echo a\necho b"),
            ]
        },
        {"text": "done"},
    )
    session = flow.Session.from_user_message("look", project=project).to(
        "local", spec=str(tmp_path)
    )

    session = flow.Agent("Look around.", provider)(session)

    listing, exists, missing, code, ruby, multiline = tool_result_outputs(session)
    assert listing == {"entries": [{"name": "a.md", "path": "docs/a.md", "is_dir": False}]}
    assert (exists, missing) == ({"ok": True, "exists": True}, {"ok": False, "exists": False})
    assert (code["stdout"], code["exit_code"], code["error"]) == ("42\n", 0, None)
    assert ruby == "ValueError: language 'ruby' is not available; only python is"
    assert multiline == "ValueError: multiline commands are rejected"


def test_the_sandbox_policy_governs_openraths_tools_by_either_name(
    project: Any, tmp_path: Path
) -> None:
    # The operator allowed reading only (under our operation name): OpenRath's read tool works,
    # its write tool is refused and writes nothing.
    provider = scripted(
        {
            "tool_calls": [
                call("c1", "read_workspace_file", path="in.txt"),
                call("c2", "write_workspace_file", path="out.txt", content="x"),
                call("c3", "run_shell_command", cmd="touch made.txt"),
            ]
        },
        {"text": "ok"},
    )
    (tmp_path / "in.txt").write_text("data")
    session = flow.Session.from_user_message("go", project=project).to(
        "local", spec=str(tmp_path), policy=ToolPolicy(allowed_tools=frozenset({"read_file"}))
    )

    session = flow.Agent("Try.", provider)(session)

    read, write, shell = tool_result_outputs(session)
    assert read["data"] == "data"
    assert write == "tool 'write_workspace_file' is not allowed; allowed tools: read_file"
    assert shell == "tool 'run_shell_command' is not allowed; allowed tools: read_file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_without_a_sandbox_the_tools_report_it_to_the_model(project: Any) -> None:
    provider = scripted({"tool_calls": [call("c1", "run_shell_command", cmd="ls")]}, {"text": "."})
    session = flow.Session.from_user_message("ls", project=project)

    session = flow.Agent("Try.", provider)(session)

    [error] = tool_result_outputs(session)
    assert error.startswith("NoSandbox: session has no sandbox")


def test_a_user_tool_may_not_shadow_a_builtin_and_system_tools_can_be_left_out() -> None:
    provider = scripted({"text": "x"})

    @flow.tool(name="run_code")
    def mine(code: str) -> str:
        """Mine."""
        return code

    with pytest.raises(ToolNameConflictError, match="user tool 'run_code' shadows a built-in"):
        flow.Agent("p", provider, tools=[mine])
    with pytest.raises(ToolNameConflictError):
        merge_tools_for_loop([mine])
    agent = flow.Agent("p", provider, tools=[mine], system_tools=False)
    assert [s["function"]["name"] for s in agent.tool_schemas()] == ["run_code"]
    assert sorted(merge_tools_for_loop(None)) == sorted(OPENRATH_TOOLS)
