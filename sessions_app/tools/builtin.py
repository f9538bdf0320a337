"""Built-in tools: files, shell and Python in the session's sandbox.

Each tool finds the sandbox from ``session.placement`` (``sandbox_for``), applies the sandbox's
policy (tool list, command allow/deny lists, timeouts, output caps) and returns a JSON dict.

Two sets over the same sandbox operations:

* ``BUILTIN_TOOLS`` (``tools="builtin"``): ``read_file``, ``write_file``, ``list_dir``,
  ``run_shell``, ``run_python``;
* ``SYSTEM_TOOLS``: OpenRath 2.0's built-ins under its names and argument names
  (``run_shell_command(cmd)``, ``read_workspace_file(path, encoding)``,
  ``write_workspace_file(path, content)``, ``list_workspace_files(path)``,
  ``workspace_path_exists(path)``, ``run_code(code, language, timeout)``), in every agent's loop
  by default as in OpenRath (``Agent(system_tools=False)`` leaves them out). A placement policy's
  ``allowed_tools`` may name either the OpenRath name or the operation's name here
  (``read_file`` allows ``read_workspace_file``).
"""

from __future__ import annotations

from typing import Any

from sessions_app.tools.base import FlowToolCall
from sessions_app.tools.decorator import tool

# The sandbox policy's ``max_output_bytes`` (per stream, per file) is the knob for these tools;
# this only has to be large enough not to cut a result the policy already capped.
SANDBOX_TOOL_MAX_OUTPUT_CHARS = 160_000


def session_sandbox(session: Any, tool_name: str, operation: str | None = None) -> Any:
    """The session's sandbox, after checking that its policy allows ``tool_name`` (or the
    sandbox ``operation`` it performs, when the policy names that instead)."""
    # Imported here: the sandbox package imports the tool policy, so a module-level import
    # would make ``sessions_app.tools`` and ``sessions_app.sandbox`` import each other.
    from sessions_app.sandbox import NoSandbox, sandbox_for

    placement = getattr(session, "placement", None)
    if not placement:
        raise NoSandbox()
    sandbox = sandbox_for(placement)
    allowed = sandbox.policy.allowed_tools
    if operation is not None and allowed is not None and operation in allowed:
        return sandbox
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


# --- OpenRath's built-in tools ------------------------------------------------------------------

#: OpenRath refuses longer commands.
MAX_COMMAND_CHARS = 2048
_TEXT_ENCODINGS = frozenset({"utf-8", "utf8"})


@tool(name="run_shell_command", max_output_chars=SANDBOX_TOOL_MAX_OUTPUT_CHARS, writes=True)
def run_shell_command(session: Any, cmd: str) -> dict[str, Any]:
    """Run one shell command inside the active sandbox workspace. Prefer short commands such
    as ``echo Hello``.

    Args:
        cmd: Shell command string
    """
    if "\n" in cmd or "\r" in cmd:
        raise ValueError("multiline commands are rejected")
    if len(cmd) > MAX_COMMAND_CHARS:
        raise ValueError(f"command too long (more than {MAX_COMMAND_CHARS} characters)")
    sandbox = session_sandbox(session, "run_shell_command", "run_shell")
    result = sandbox.run_shell(cmd, timeout=sandbox.policy.effective_timeout(None))
    data: dict[str, Any] = result.as_dict()
    return data


@tool(name="read_workspace_file", max_output_chars=SANDBOX_TOOL_MAX_OUTPUT_CHARS)
def read_workspace_file(session: Any, path: str, encoding: str | None = "utf-8") -> dict[str, Any]:
    """Read a file from the sandbox workspace.

    Args:
        path: File path relative to the workspace root.
        encoding: Text encoding (only UTF-8 is supported; null also reads it as UTF-8 text).
    """
    if encoding is not None and encoding.lower() not in _TEXT_ENCODINGS:
        raise ValueError(f"encoding {encoding!r} is not supported; files are read as UTF-8")
    sandbox = session_sandbox(session, "read_workspace_file", "read_file")
    limit = sandbox.policy.max_output_bytes
    size = sandbox.file_size(path)
    data = sandbox.read_file(path, max_bytes=limit)
    return {"data": data, "size": size, "truncated": size > limit}


@tool(name="write_workspace_file", max_output_chars=SANDBOX_TOOL_MAX_OUTPUT_CHARS, writes=True)
def write_workspace_file(session: Any, path: str, content: str) -> dict[str, Any]:
    """Write UTF-8 text to a path inside the sandbox workspace.

    Args:
        path: File path relative to the workspace root.
        content: The complete new content of the file.
    """
    sandbox = session_sandbox(session, "write_workspace_file", "write_file")
    return {"bytes_written": sandbox.write_file(path, content)}


@tool(name="list_workspace_files", max_output_chars=SANDBOX_TOOL_MAX_OUTPUT_CHARS)
def list_workspace_files(session: Any, path: str) -> dict[str, Any]:
    """List non-recursive directory entries under a sandbox path.

    Args:
        path: Directory path relative to the workspace root.
    """
    sandbox = session_sandbox(session, "list_workspace_files", "list_dir")
    base = path.strip("/") or "."
    entries = [
        {
            "name": entry["name"],
            "path": entry["name"] if base == "." else f"{base}/{entry['name']}",
            "is_dir": entry["type"] == "dir",
        }
        for entry in sandbox.list_dir(path)
    ]
    return {"entries": entries}


@tool(name="workspace_path_exists", max_output_chars=SANDBOX_TOOL_MAX_OUTPUT_CHARS)
def workspace_path_exists(session: Any, path: str) -> dict[str, Any]:
    """Return whether a path exists inside the sandbox workspace.

    Args:
        path: Path relative to the workspace root.
    """
    sandbox = session_sandbox(session, "workspace_path_exists", "list_dir")
    parent, _, leaf = path.strip("/").rpartition("/")
    if not leaf or leaf == ".":
        return {"ok": True, "exists": True}
    try:
        names = {entry["name"] for entry in sandbox.list_dir(parent or ".")}
    except (FileNotFoundError, NotADirectoryError):
        names = set()
    exists = leaf in names
    return {"ok": exists, "exists": exists}


@tool(name="run_code", max_output_chars=SANDBOX_TOOL_MAX_OUTPUT_CHARS, writes=True)
def run_code(
    session: Any, code: str, language: str = "python", timeout: float | None = None
) -> dict[str, Any]:
    """Execute a code snippet inside the sandbox code interpreter (default language: python).

    Args:
        code: The program's source.
        language: Interpreter language (only python is available).
        timeout: Optional timeout in seconds (capped by the policy).
    """
    if language.lower() != "python":
        raise ValueError(f"language {language!r} is not available; only python is")
    sandbox = session_sandbox(session, "run_code", "run_python")
    result = sandbox.run_python(code, timeout=sandbox.policy.effective_timeout(timeout))
    data: dict[str, Any] = result.as_dict()
    failed = result.exit_code != 0 or result.timed_out
    data.update({"text": None, "error": (result.stderr or "failed") if failed else None})
    return data


class ToolNameConflictError(ValueError):
    """A tool given to an agent has the name of one of OpenRath's built-in tools."""


#: OpenRath's built-in tools, by name (``flow.tool.global_system_tools()``).
SYSTEM_TOOLS: tuple[FlowToolCall, ...] = (
    run_shell_command,
    read_workspace_file,
    write_workspace_file,
    list_workspace_files,
    workspace_path_exists,
    run_code,
)
