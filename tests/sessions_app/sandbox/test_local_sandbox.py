"""``LocalSandbox``: confinement of paths, processes, environment and output."""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path

import pytest

from sessions_app.sandbox import (
    LocalSandbox,
    NoSandbox,
    SandboxViolation,
    sandbox_for,
)
from sessions_app.tools import ToolPolicy, ToolPolicyViolation
from tests.support import process_alive


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "workspace"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("TOP SECRET")
    return secret


@pytest.fixture
def sandbox(root: Path) -> LocalSandbox:
    return LocalSandbox(root, ToolPolicy(command_timeout_seconds=10))


# -- paths -----------------------------------------------------------------------------------


def test_files_round_trip_inside_the_root(sandbox: LocalSandbox, root: Path) -> None:
    assert sandbox.write_file("notes/today.txt", "héllo\n") == 7
    assert (root / "notes" / "today.txt").read_text() == "héllo\n"
    assert sandbox.read_file("notes/today.txt") == "héllo\n"
    assert sandbox.read_file(str(root / "notes" / "today.txt")) == "héllo\n"
    assert sandbox.read_file("notes/../notes/today.txt", max_bytes=2) == "h\ufffd"
    assert sandbox.file_size("notes/today.txt") == 7


def test_list_dir(sandbox: LocalSandbox, root: Path) -> None:
    sandbox.write_file("b.txt", "12345")
    sandbox.write_file("a/inner.txt", "x")
    os.symlink("b.txt", root / "c-link")

    assert sandbox.list_dir(".") == [
        {"name": "a", "type": "dir", "size": 0},
        {"name": "b.txt", "type": "file", "size": 5},
        {"name": "c-link", "type": "symlink", "size": 0},
    ]
    assert sandbox.list_dir("a") == [{"name": "inner.txt", "type": "file", "size": 1}]


@pytest.mark.parametrize("path", ["../outside/secret.txt", "a/../../outside/secret.txt", ".."])
def test_dot_dot_is_refused(sandbox: LocalSandbox, outside: Path, path: str) -> None:
    with pytest.raises(SandboxViolation) as caught:
        sandbox.read_file(path)
    assert str(caught.value) == f"path {path!r} is outside the workspace"
    with pytest.raises(SandboxViolation):
        sandbox.list_dir(path)


def test_write_outside_is_refused_and_nothing_is_written(
    sandbox: LocalSandbox, outside: Path
) -> None:
    with pytest.raises(SandboxViolation):
        sandbox.write_file("../outside/new.txt", "x")
    with pytest.raises(SandboxViolation):
        sandbox.write_file(str(outside), "overwritten")
    assert not (outside.parent / "new.txt").exists()
    assert outside.read_text() == "TOP SECRET"


def test_absolute_paths_outside_are_refused(sandbox: LocalSandbox, outside: Path) -> None:
    for path in (str(outside), "/etc/passwd", "/"):
        with pytest.raises(SandboxViolation):
            sandbox.read_file(path)


def test_symlink_pointing_out_is_refused(sandbox: LocalSandbox, root: Path, outside: Path) -> None:
    os.symlink(outside, root / "leak.txt")
    os.symlink(outside.parent, root / "leakdir")

    with pytest.raises(SandboxViolation):
        sandbox.read_file("leak.txt")
    with pytest.raises(SandboxViolation):
        sandbox.write_file("leak.txt", "overwritten")
    with pytest.raises(SandboxViolation):
        sandbox.write_file("leakdir/planted.txt", "x")
    with pytest.raises(SandboxViolation):
        sandbox.list_dir("leakdir")
    assert outside.read_text() == "TOP SECRET"
    assert sorted(p.name for p in outside.parent.iterdir()) == ["secret.txt"]


def test_symlink_created_by_a_command_is_refused(sandbox: LocalSandbox, outside: Path) -> None:
    result = sandbox.run_shell(f"ln -s {outside} made-by-command && echo linked")
    assert (result.exit_code, result.stdout) == (0, "linked\n")

    with pytest.raises(SandboxViolation):
        sandbox.read_file("made-by-command")


def test_symlink_inside_the_root_is_followed(sandbox: LocalSandbox, root: Path) -> None:
    sandbox.write_file("real/data.txt", "inside")
    os.symlink(root / "real", root / "alias")
    assert sandbox.read_file("alias/data.txt") == "inside"
    sandbox.write_file("alias/more.txt", "also inside")
    assert (root / "real" / "more.txt").read_text() == "also inside"


def test_directories_and_special_files_are_not_read(sandbox: LocalSandbox, root: Path) -> None:
    sandbox.write_file("d/f.txt", "x")
    with pytest.raises(IsADirectoryError):
        sandbox.read_file("d")
    with pytest.raises(IsADirectoryError):
        sandbox.read_file(".")
    os.mkfifo(root / "pipe")
    with pytest.raises(IsADirectoryError, match="not a regular file"):
        sandbox.read_file("pipe")


# -- commands --------------------------------------------------------------------------------


def test_command_runs_in_the_root_with_stdin_closed(sandbox: LocalSandbox, root: Path) -> None:
    result = sandbox.run_shell("pwd; cat; echo done; echo oops >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, f"{root}\ndone\n", "oops\n")
    assert (result.timed_out, result.truncated) == (False, False)


def test_environment_is_scrubbed(
    sandbox: LocalSandbox, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak-1234")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:pw@db/prod")

    shell = sandbox.run_shell("env")
    python = sandbox.run_python("import json, os; print(json.dumps(dict(os.environ)))")

    assert "sk-must-not-leak-1234" not in shell.stdout
    assert "OPENAI_API_KEY" not in shell.stdout
    assert "DATABASE_URL" not in shell.stdout
    assert json.loads(python.stdout) == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root),
        "LANG": "C.UTF-8",
        "TMPDIR": str(root / ".tmp"),
    }


def test_timeout_kills_a_term_ignoring_command_and_its_grandchildren(
    root: Path,
) -> None:
    # 3 s, not 1: the command must have written its three pids before the limit ends it, which
    # on a loaded machine can take longer than a second.
    sandbox = LocalSandbox(root, ToolPolicy(command_timeout_seconds=3))
    command = (
        'bash -c \'trap "" TERM; echo $$ > pids; '
        '(trap "" TERM; sleep 100; true) & echo $! >> pids; '
        "sleep 100 & echo $! >> pids; wait'"
    )
    started = time.monotonic()

    result = sandbox.run_shell(command)

    elapsed = time.monotonic() - started
    assert result.timed_out is True
    # Only the 3 s limit can end a command that sleeps 100 s; the upper bound says that it did,
    # with room for a loaded machine (kill grace, reaping), not how fast this machine is.
    assert 3.0 <= elapsed < 60
    assert result.exit_code < 0
    pids = [int(line) for line in (root / "pids").read_text().split()]
    assert len(pids) == 3
    assert [pid for pid in pids if process_alive(pid)] == []


def test_background_processes_do_not_outlive_the_command(sandbox: LocalSandbox, root: Path) -> None:
    started = time.monotonic()

    result = sandbox.run_shell("sleep 60 & echo $! > bg.pid; echo started")

    assert (result.exit_code, result.stdout, result.timed_out) == (0, "started\n", False)
    # Well under the background job's 60 s: the command did not wait for it (load margin).
    assert time.monotonic() - started < 30
    assert process_alive(int((root / "bg.pid").read_text())) is False


def test_huge_output_is_capped_in_bounded_memory(root: Path) -> None:
    sandbox = LocalSandbox(root, ToolPolicy(max_output_bytes=64_000))
    tracemalloc.start()
    try:
        result = sandbox.run_shell("yes | head -c 50000000")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert result.exit_code == 0
    assert result.truncated is True
    assert result.stdout == ("y\n" * 24_000 + "\n…[truncated 49936000 bytes]…\n" + "y\n" * 8_000)
    # 50 MB went through the pipe; the process kept only the capped buffers.
    assert peak < 3_000_000


def test_deny_list_stops_the_command_before_it_runs(sandbox: LocalSandbox, root: Path) -> None:
    with pytest.raises(ToolPolicyViolation, match="deny pattern 'shutdown'"):
        sandbox.run_shell("touch ran.txt; shutdown -h now")
    assert not (root / "ran.txt").exists()


def test_allow_list(root: Path) -> None:
    sandbox = LocalSandbox(root, ToolPolicy(command_allow=("echo",)))
    assert sandbox.run_shell("echo allowed").stdout == "allowed\n"
    with pytest.raises(ToolPolicyViolation, match="program 'touch' is not on the allow list"):
        sandbox.run_shell("touch x")
    assert not (root / "x").exists()


def test_run_python(sandbox: LocalSandbox, root: Path) -> None:
    result = sandbox.run_python(
        "import os, sys; print(os.getcwd()); print('warn', file=sys.stderr); sys.exit(4)"
    )
    assert (result.exit_code, result.stdout, result.stderr) == (4, f"{root}\n", "warn\n")


def test_run_python_large_program_goes_through_a_file(sandbox: LocalSandbox, root: Path) -> None:
    code = "x = 1\n" * 25_000 + "print(x + 1)\n"
    result = sandbox.run_python(code)
    assert (result.exit_code, result.stdout) == (0, "2\n")
    assert list((root / ".tmp").iterdir()) == []


def test_run_python_timeout(root: Path) -> None:
    # The policy's limit and the program's sleep are an hour: only the call's 0.5 s can end it
    # within the bound, which leaves a loaded machine plenty of room (kill grace, reaping).
    sandbox = LocalSandbox(root, ToolPolicy(command_timeout_seconds=3600))
    started = time.monotonic()
    result = sandbox.run_python("import time; time.sleep(3600)", timeout=0.5)
    assert result.timed_out is True
    assert time.monotonic() - started < 50


# -- registry --------------------------------------------------------------------------------


def test_sandbox_for_local_placement(tmp_path: Path) -> None:
    sandbox = sandbox_for(
        {
            "backend": "local",
            "spec": str(tmp_path / "ws"),
            "policy": {"command_allow": ["ls"], "max_calls": 3},
        }
    )
    assert isinstance(sandbox, LocalSandbox)
    assert sandbox.root == os.path.realpath(tmp_path / "ws")
    assert sandbox.policy == ToolPolicy(command_allow=("ls",), max_calls=3)


def test_relative_spec_lives_under_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENRATH_DATA_DIR", str(tmp_path / "data"))
    sandbox = sandbox_for({"backend": "local", "spec": "project-a/run-1"})
    assert isinstance(sandbox, LocalSandbox)
    assert sandbox.root == os.path.realpath(
        tmp_path / "data" / "workspaces" / "project-a" / "run-1"
    )
    with pytest.raises(ValueError, match="must not contain '..'"):
        sandbox_for({"backend": "local", "spec": "../escape"})


def test_sandbox_for_errors() -> None:
    with pytest.raises(NoSandbox) as caught:
        sandbox_for(None)
    assert str(caught.value) == "session has no sandbox: call session.to('local', spec=...)"
    with pytest.raises(ValueError, match="unknown sandbox backend 'docker'; known backends: "):
        sandbox_for({"backend": "docker", "spec": "x"})
    with pytest.raises(ValueError, match="needs a non-empty 'spec'"):
        sandbox_for({"backend": "local"})
    with pytest.raises(ValueError, match="unknown keys: max_cals"):
        sandbox_for({"backend": "local", "spec": "/tmp/x", "policy": {"max_cals": 1}})


def test_writing_below_a_file_is_not_a_violation(sandbox: LocalSandbox) -> None:
    sandbox.write_file("plain.txt", "x")
    with pytest.raises(NotADirectoryError, match="'plain.txt' is not a directory"):
        sandbox.write_file("plain.txt/child.txt", "y")


def test_a_symlink_swapped_in_after_the_check_is_refused_at_open(root: Path, outside: Path) -> None:
    class CheckedBeforeTheSwap(LocalSandbox):
        """Skips realpath, as if the links below appeared between the check and the open."""

        def _relative_parts(self, path: str) -> list[str]:
            return path.split("/")

    sandbox = CheckedBeforeTheSwap(root)
    os.symlink(outside.parent, root / "swapped-dir")
    os.symlink(outside, root / "swapped-file")

    with pytest.raises(SandboxViolation, match="changed to a symlink while being opened"):
        sandbox.read_file("swapped-dir/secret.txt")
    with pytest.raises(SandboxViolation, match="became a symlink while being opened"):
        sandbox.write_file("swapped-file", "overwritten")
    assert outside.read_text() == "TOP SECRET"
