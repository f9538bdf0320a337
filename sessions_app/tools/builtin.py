"""Built-in tools: files, shell and Python in the session's sandbox.

Each tool finds the sandbox from ``session.placement`` (``sandbox_for``), applies the sandbox's
policy (tool list, command allow/deny lists, timeouts, output caps) and returns a JSON dict.
"""

from __future__ import annotations

from typing import Any

from sessions_app.tools.base import FlowToolCall
from sessions_app.tools.decorator import tool

# The sandbox policy's ``max_output_bytes`` (per stream, per file) is the knob for these tools;
# this only has to be large enough not to cut a result the policy already capped.
SANDBOX_TOOL_MAX_OUTPUT_CHARS = 160_000


def session_sandbox(session: Any, tool_name: str) -> Any:
    """The session's sandbox, after checking that its policy allows ``tool_name``."""
    # Imported here: the sandbox package imports the tool policy, so a module-level import
    # would make ``sessions_app.tools`` and ``sessions_app.sandbox`` import each other.
    from sessions_app.sandbox import NoSandbox, sandbox_for

    placement = getattr(session, "placement", None)
    if not placement:
        raise NoSandbox()
    sandbox = sandbox_for(placement)
    sandbox.policy.check_tool(tool_name)
    return sandbox


@tool(name="read_file", max_output_chars=SANDBOX_TOOL_MAX_OUTPUT_CHARS)
def read_file(session: Any, path: str) -> dict[str, Any]:
    """Read a text file from the workspace.

    Args:
        path: File path relative to the workspace root.
    """
    sandbox = session_sandbox(session, "read_file")
    limit = sandbox.policy.max_output_bytes
    size = sandbox.file_size(path)
    content = sandbox.read_file(path, max_bytes=limit)
    return {"path": path, "content": content, "size": size, "truncated": size > limit}


@tool(name="write_file", max_output_chars=SANDBOX_TOOL_MAX_OUTPUT_CHARS, writes=True)
def write_file(session: Any, path: str, content: str) -> dict[str, Any]:
    """Create or overwrite a text file in the workspace (parent directories are created).

    Args:
        path: File path relative to the workspace root.
        content: The complete new content of the file.
    """
    sandbox = session_sandbox(session, "write_file")
    written = sandbox.write_file(path, content)
    return {"path": path, "bytes_written": written}


@tool(name="list_dir", max_output_chars=SANDBOX_TOOL_MAX_OUTPUT_CHARS)
def list_dir(session: Any, path: str = ".") -> dict[str, Any]:
    """List a workspace directory: each entry's name, type (file, dir, symlink) and size.

    Args:
        path: Directory path relative to the workspace root.
    """
    sandbox = session_sandbox(session, "list_dir")
    return {"path": path, "entries": sandbox.list_dir(path)}


@tool(name="run_shell", max_output_chars=SANDBOX_TOOL_MAX_OUTPUT_CHARS, writes=True)
def run_shell(session: Any, command: str, timeout_seconds: float | None = None) -> dict[str, Any]:
    """Run a shell command in the workspace and return its exit code and output.

    Args:
        command: The command line, run by /bin/sh in the workspace directory.
        timeout_seconds: Stop the command after this many seconds (capped by the policy).
    """
    sandbox = session_sandbox(session, "run_shell")
    result = sandbox.run_shell(command, timeout=sandbox.policy.effective_timeout(timeout_seconds))
    data: dict[str, Any] = result.as_dict()
    return data


@tool(name="run_python", max_output_chars=SANDBOX_TOOL_MAX_OUTPUT_CHARS, writes=True)
def run_python(session: Any, code: str, timeout_seconds: float | None = None) -> dict[str, Any]:
    """Run a Python program in the workspace and return its exit code and output.

    Args:
        code: Python source; print what you want to see.
        timeout_seconds: Stop the program after this many seconds (capped by the policy).
    """
    sandbox = session_sandbox(session, "run_python")
    result = sandbox.run_python(code, timeout=sandbox.policy.effective_timeout(timeout_seconds))
    data: dict[str, Any] = result.as_dict()
    return data


BUILTIN_TOOLS: tuple[FlowToolCall, ...] = (read_file, write_file, list_dir, run_shell, run_python)
