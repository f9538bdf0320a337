"""``LocalSandbox``: a workspace directory on this machine, for one trusted user.

File operations are confined to the workspace: every path is resolved with ``realpath`` and
refused unless it lands inside the root (``../``, absolute paths, symlinks pointing out), and the
file is then opened by walking the resolved components from the root with ``O_NOFOLLOW``, so a
symlink swapped in between the check and the open is refused too.

Commands run with the workspace as working directory, a scrubbed environment, stdin at EOF and
in their own process group; at the timeout the whole group gets SIGTERM, then SIGKILL after a
short grace, and background processes left behind by a finished command are stopped the same
way, so nothing a command started outlives the call. Output is read incrementally and capped
(head and tail kept), so a command printing gigabytes costs bounded memory.

Commands also run under the policy's per-process limits (address space, CPU time, file size,
no core dumps) through util-linux's ``prlimit``.

Limits: commands run as the same OS user as the server, so they are *not* confined to the
workspace by the kernel: they can read what that user can (including ``/proc/<worker>/environ``
where the worker is dumpable), reach the network, and a process that deliberately leaves its
group (``setsid``) escapes the group kill. This is the fallback; ``BwrapSandbox``
(``sessions_app.sandbox.bwrap``) confines commands with the kernel where bubblewrap works.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sessions_app.sandbox.base import CommandResult, SandboxBackend, SandboxViolation
from sessions_app.tools.policy import ToolPolicy

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
#: util-linux's prlimit (Debian: essential), which sets the resource limits of commands.
PRLIMIT = shutil.which("prlimit", path="/usr/bin:/bin")
TMP_DIR_NAME = ".tmp"
#: How long a command gets to exit after SIGTERM before SIGKILL.
TERM_GRACE_SECONDS = 1.0
#: How long background processes may keep the pipes open after the command itself exited.
LINGER_SECONDS = 0.5
_READ_CHUNK = 65_536
_POLL_SECONDS = 0.02
# Larger programs go through a file: one argv string is limited to 128 KiB on Linux.
_MAX_INLINE_CODE = 100_000


class _CappedBuffer:
    """Keeps the first three quarters and the last quarter of ``cap`` bytes of a stream."""

    def __init__(self, cap: int) -> None:
        self.tail_cap = cap // 4
        self.head_cap = cap - self.tail_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def append(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self.tail += chunk
            excess = len(self.tail) - self.tail_cap
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + tail
        dropped = self.total - len(self.head) - len(self.tail)
        return f"{head}\n…[truncated {dropped} bytes]…\n{tail}"


def group_members(pgid: int) -> list[int] | None:
    """Live (non-zombie) processes of a process group, from /proc; None where /proc is absent."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    members: list[int] = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: parse after the last ')'.
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) < 3:
            continue
        state, group = fields[0], fields[2]
        if state not in (b"Z", b"X") and int(group) == pgid:
            members.append(int(entry))
    return members


def _wait_group_gone(pgid: int, seconds: float) -> bool:
    """Whether every live member of the group is gone within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        members = group_members(pgid)
        if members is not None and not members:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_SECONDS)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def stop_process_group(pgid: int, grace: float = TERM_GRACE_SECONDS) -> None:
    """SIGTERM the group, then SIGKILL whatever is still alive after ``grace`` seconds.

    The caller must not have reaped the group leader yet: an unreaped leader keeps its pid, and
    so the group id, from being reused by an unrelated process while we signal it.
    """
    members = group_members(pgid)
    if members is not None and not members:
        return
    _signal_group(pgid, signal.SIGTERM)
    if _wait_group_gone(pgid, grace):
        return
    _signal_group(pgid, signal.SIGKILL)
    _wait_group_gone(pgid, 2.0)


def _leader_exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (WNOWAIT keeps the pid reserved)."""
    try:
        result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return result is not None


def limit_arguments(policy: ToolPolicy, timeout: float, *, processes: bool) -> list[str]:
    """A ``prlimit`` prefix applying the policy's per-process limits (empty without prlimit).

    CPU time gets the command's timeout plus a second (SIGXCPU, then SIGKILL a second later);
    core dumps are off. The process limit is only set when ``processes`` is true: outside a
    user namespace RLIMIT_NPROC counts every process of the server's user, not the command's.
    """
    if PRLIMIT is None:
        return []
    cpu = math.ceil(timeout) + 1
    arguments = [PRLIMIT, f"--cpu={cpu}:{cpu + 1}", "--core=0"]
    if policy.max_memory_bytes is not None:
        arguments.append(f"--as={policy.max_memory_bytes}")
    if policy.max_file_bytes is not None:
        arguments.append(f"--fsize={policy.max_file_bytes}")
    if processes and policy.max_processes is not None:
        arguments.append(f"--nproc={policy.max_processes}")
    return [*arguments, "--"]


class LocalSandbox(SandboxBackend):
    """A directory on the local filesystem as a session's workspace."""

    name = "local"

    def __init__(self, root: str | os.PathLike[str], policy: ToolPolicy | None = None) -> None:
        Path(root).mkdir(parents=True, exist_ok=True)
        self.root = os.path.realpath(root)
        self.policy = policy or ToolPolicy()

    def __repr__(self) -> str:
        return f"<LocalSandbox root={self.root!r}>"

    # -- paths ----------------------------------------------------------------------------------

    def _relative_parts(self, path: str) -> list[str]:
        """The components of ``path`` resolved beneath the root; ``SandboxViolation`` if outside."""
        if not isinstance(path, str) or "\x00" in path:
            raise SandboxViolation(f"invalid path {path!r}")
        # join() keeps an absolute path as is: absolute paths are allowed only inside the root.
        resolved = os.path.realpath(os.path.join(self.root, path))
        if resolved != self.root and not resolved.startswith(self.root + os.sep):
            raise SandboxViolation(f"path {path!r} is outside the workspace")
        relative = os.path.relpath(resolved, self.root)
        return [] if relative == "." else relative.split(os.sep)

    @contextlib.contextmanager
    def _directory_fd(self, parts: list[str], *, create: bool = False) -> Iterator[int]:
        """An fd of the directory ``parts`` beneath the root, walked without following links."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.root, flags)
        try:
            for part in parts:
                try:
                    next_fd = os.open(part, flags, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    next_fd = os.open(part, flags, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    if stat.S_ISLNK(os.lstat(part, dir_fd=fd).st_mode):
                        # realpath saw no link here: one was swapped in after the check.
                        raise SandboxViolation(
                            f"{'/'.join(parts)!r} changed to a symlink while being opened"
                        ) from None
                    raise NotADirectoryError(f"{part!r} is not a directory") from None
                os.close(fd)
                fd = next_fd
            yield fd
        finally:
            os.close(fd)

    def _open_file(self, path: str, flags: int, *, create_parents: bool = False) -> int:
        parts = self._relative_parts(path)
        if not parts:
            raise IsADirectoryError(f"{path!r} is the workspace directory, not a file")
        with self._directory_fd(parts[:-1], create=create_parents) as dir_fd:
            try:
                fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise SandboxViolation(
                        f"{path!r} became a symlink while being opened"
                    ) from None
                raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise IsADirectoryError(f"{path!r} is not a regular file")
        return fd

    # -- files ----------------------------------------------------------------------------------

    def read_file(self, path: str, *, max_bytes: int | None = None) -> str:
        fd = self._open_file(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read() if max_bytes is None else handle.read(max_bytes)
        return data.decode("utf-8", errors="replace")

    def file_size(self, path: str) -> int:
        fd = self._open_file(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def write_file(self, path: str, content: str) -> int:
        data = content.encode("utf-8")
        fd = self._open_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create_parents=True)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return len(data)

    def list_dir(self, path: str = ".") -> list[dict[str, Any]]:
        parts = self._relative_parts(path)
        entries: list[dict[str, Any]] = []
        with self._directory_fd(parts) as dir_fd, os.scandir(dir_fd) as iterator:
            for entry in iterator:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    kind = "symlink"
                elif stat.S_ISDIR(info.st_mode):
                    kind = "dir"
                elif stat.S_ISREG(info.st_mode):
                    kind = "file"
                else:
                    kind = "other"
                size = info.st_size if kind == "file" else 0
                entries.append({"name": entry.name, "type": kind, "size": size})
        return sorted(entries, key=lambda item: item["name"])

    # -- commands -------------------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """The whole environment a command sees: nothing is inherited from the server."""
        tmp = os.path.join(self.root, TMP_DIR_NAME)
        os.makedirs(tmp, exist_ok=True)
        return {"PATH": SAFE_PATH, "HOME": self.root, "LANG": "C.UTF-8", "TMPDIR": tmp}

    def run_shell(self, command: str, timeout: float | None = None) -> CommandResult:
        self.policy.check_command(command)
        return self._run(["/bin/sh", "-c", command], timeout)

    def run_python(self, code: str, timeout: float | None = None) -> CommandResult:
        if len(code) <= _MAX_INLINE_CODE:
            return self._run([self.python_executable(), "-I", "-c", code], timeout)
        script = os.path.join(self.root, TMP_DIR_NAME, f"snippet-{os.getpid()}-{time.time_ns()}.py")
        os.makedirs(os.path.dirname(script), exist_ok=True)
        Path(script).write_text(code, encoding="utf-8")
        try:
            return self._run([self.python_executable(), "-I", script], timeout)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(script)

    def python_executable(self) -> str:
        """The interpreter ``run_python`` uses."""
        return sys.executable

    def launch(self, argv: list[str], timeout: float) -> list[str]:
        """The argv actually started for ``argv``: here, under the policy's resource limits."""
        return [*limit_arguments(self.policy, timeout, processes=False), *argv]

    def _run(self, argv: list[str], timeout: float | None) -> CommandResult:
        limit = self.policy.effective_timeout(timeout)
        cap = self.policy.max_output_bytes
        started = time.monotonic()
        deadline = started + limit
        process = subprocess.Popen(  # noqa: S603 - argv is built here, the shell is the point
            self.launch(argv, limit),
            cwd=self.root,
            # The launcher's environment too: nothing is inherited from the server.
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        pgid = process.pid
        assert process.stdout is not None
        assert process.stderr is not None
        buffers = {
            process.stdout.fileno(): _CappedBuffer(cap),
            process.stderr.fileno(): _CappedBuffer(cap),
        }
        selector = selectors.DefaultSelector()
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        timed_out = False
        exited_at: float | None = None
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    timed_out = not _leader_exited(process.pid)
                    break
                if exited_at is None and _leader_exited(process.pid):
                    exited_at = now
                open_fds = selector.get_map()
                if exited_at is not None and (not open_fds or now - exited_at > LINGER_SECONDS):
                    break
                if not open_fds:
                    time.sleep(min(_POLL_SECONDS, deadline - now))
                    continue
                for key, _ in selector.select(timeout=min(0.05, deadline - now)):
                    self._read_into(selector, key.fd, buffers)
            # Stops the command on timeout, and whatever it left running in the background.
            stop_process_group(pgid, TERM_GRACE_SECONDS if timed_out else 0.2)
            drain_deadline = time.monotonic() + 0.5
            while selector.get_map() and time.monotonic() < drain_deadline:
                for key, _ in selector.select(timeout=0.05):
                    self._read_into(selector, key.fd, buffers)
        finally:
            selector.close()
            process.stdout.close()
            process.stderr.close()
            if process.poll() is None:
                _signal_group(pgid, signal.SIGKILL)
            exit_code = process.wait(timeout=5)
        stdout_buffer, stderr_buffer = buffers.values()
        return CommandResult(
            exit_code=exit_code,
            stdout=stdout_buffer.text(),
            stderr=stderr_buffer.text(),
            timed_out=timed_out,
            truncated=stdout_buffer.truncated or stderr_buffer.truncated,
            elapsed_ms=int((time.monotonic() - started) * 1000),
        )

    @staticmethod
    def _read_into(
        selector: selectors.BaseSelector, fd: int, buffers: dict[int, _CappedBuffer]
    ) -> None:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        if chunk:
            buffers[fd].append(chunk)
        else:
            selector.unregister(fd)


def local_backend(spec: str, policy: ToolPolicy) -> LocalSandbox:
    """Registry factory: a relative spec lives under ``$OPENRATH_DATA_DIR/workspaces``."""
    path = Path(spec).expanduser()
    if not path.is_absolute():
        if ".." in path.parts:
            raise ValueError(f"workspace spec {spec!r} must not contain '..'")
        data_dir = Path(os.environ.get("OPENRATH_DATA_DIR") or ".openrath")
        path = data_dir / "workspaces" / path
    return LocalSandbox(path, policy)
