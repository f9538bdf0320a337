"""Built-in tools dispatched against a fake session's local sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessions_app.providers import ToolCallRequest
from sessions_app.tools import BUILTIN_TOOLS, ToolOutcome, ToolPolicy, dispatch_tool


class FakeSession:
    def __init__(self, placement: dict[str, Any] | None) -> None:
        self.id = "session-1"
        self.placement = placement


TOOLS = {t.name: t for t in BUILTIN_TOOLS}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def session(root: Path) -> FakeSession:
    return FakeSession({"backend": "local", "spec": str(root)})


def run(session: FakeSession, name: str, arguments: str, **kwargs: Any) -> ToolOutcome:
    return dispatch_tool(
        TOOLS, session, ToolCallRequest(id="c", name=name, arguments=arguments), **kwargs
    )


def test_builtin_tool_set() -> None:
    assert [(t.name, t.writes) for t in BUILTIN_TOOLS] == [
        ("read_file", False),
        ("write_file", True),
        ("list_dir", False),
        ("run_shell", True),
        ("run_python", True),
    ]


def test_write_read_list(session: FakeSession, root: Path) -> None:
    assert run(session, "write_file", '{"path": "src/a.py", "content": "print(1)\\n"}').output == {
        "path": "src/a.py",
        "bytes_written": 9,
    }
    assert run(session, "read_file", '{"path": "src/a.py"}').output == {
        "path": "src/a.py",
        "content": "print(1)\n",
        "size": 9,
        "truncated": False,
    }
    assert run(session, "list_dir", "{}").output == {
        "path": ".",
        "entries": [{"name": "src", "type": "dir", "size": 0}],
    }


def test_read_file_is_capped_by_the_policy(root: Path) -> None:
    session = FakeSession(
        {"backend": "local", "spec": str(root), "policy": {"max_output_bytes": 10}}
    )
    root.mkdir()
    (root / "big.txt").write_text("0123456789abcdef")
    assert run(session, "read_file", '{"path": "big.txt"}').output == {
        "path": "big.txt",
        "content": "0123456789",
        "size": 16,
        "truncated": True,
    }


def test_run_shell_and_python(session: FakeSession) -> None:
    shell = run(session, "run_shell", '{"command": "echo hi; echo err >&2"}')
    assert shell.error is None
    assert {k: v for k, v in shell.output.items() if k != "elapsed_ms"} == {
        "exit_code": 0,
        "stdout": "hi\n",
        "stderr": "err\n",
        "timed_out": False,
        "truncated": False,
    }
    assert isinstance(shell.output["elapsed_ms"], int)
    python = run(session, "run_python", '{"code": "print(6 * 7)"}')
    assert (python.output["exit_code"], python.output["stdout"]) == (0, "42\n")


def test_timeout_argument_is_capped_by_the_policy(root: Path) -> None:
    session = FakeSession(
        {"backend": "local", "spec": str(root), "policy": {"command_timeout_seconds": 0.5}}
    )
    # Only a limit can end `sleep 300`: the policy's 0.5 s did, not the asked-for 100 s (the upper
    # bound leaves a loaded machine a wide margin).
    outcome = run(session, "run_shell", '{"command": "sleep 300", "timeout_seconds": 100}')
    assert outcome.output["timed_out"] is True
    assert 500 <= outcome.output["elapsed_ms"] < 50_000


def test_escape_attempt_is_a_policy_violation_outcome(session: FakeSession) -> None:
    assert run(session, "read_file", '{"path": "../../etc/passwd"}') == ToolOutcome(
        output=None,
        error="path '../../etc/passwd' is outside the workspace",
        error_kind="policy_violation",
        truncated=False,
    )


def test_denied_command_is_a_policy_violation_outcome(session: FakeSession, root: Path) -> None:
    outcome = run(session, "run_shell", '{"command": "touch x && reboot"}')
    assert (outcome.error_kind, outcome.error) == (
        "policy_violation",
        "command matches the deny pattern 'reboot'",
    )
    assert not (root / "x").exists()


def test_placement_policy_limits_the_tools(root: Path) -> None:
    session = FakeSession(
        {"backend": "local", "spec": str(root), "policy": {"allowed_tools": ["read_file"]}}
    )
    outcome = run(session, "write_file", '{"path": "a", "content": "b"}')
    assert (outcome.error_kind, outcome.error) == (
        "policy_violation",
        "tool 'write_file' is not allowed; allowed tools: read_file",
    )
    assert not (root / "a").exists()


def test_max_calls_per_run(session: FakeSession, root: Path) -> None:
    counter = ToolPolicy(max_calls=2).new_counter()
    for index in range(3):
        outcome = run(
            session,
            "write_file",
            f'{{"path": "f{index}.txt", "content": "x"}}',
            counter=counter,
        )
    assert outcome.error_kind == "policy_violation"
    assert sorted(p.name for p in root.iterdir()) == ["f0.txt", "f1.txt"]


def test_session_without_placement() -> None:
    assert run(FakeSession(None), "list_dir", "{}") == ToolOutcome(
        output=None,
        error="NoSandbox: session has no sandbox: call session.to('local', spec=...)",
        error_kind="tool_execution_exception",
        truncated=False,
    )
