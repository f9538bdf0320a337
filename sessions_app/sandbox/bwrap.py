"""``BwrapSandbox``: the workspace of ``LocalSandbox``, with commands in a bubblewrap OS sandbox.

File tools work exactly as in ``LocalSandbox`` (in the server process, confined to the root by
``realpath`` and an ``O_NOFOLLOW`` walk). Commands (``run_shell``, ``run_python``) run under
Debian's ``bwrap`` (bubblewrap), started with nothing but ``PATH``, ``HOME``, ``LANG`` and
``TMPDIR`` in its own environment, in:

* new user, PID, IPC, UTS, cgroup and network namespaces (``--unshare-all``; the network only
  when the policy grants it, ``ToolPolicy(network=True)``), as ``nobody`` with no
  capabilities and no further user namespaces (``--disable-userns`` where bwrap has it);
* a new mount namespace whose root holds only ``/usr`` (and the ``/bin``, ``/lib*`` links into
  it), the few files of ``/etc`` programs need, the interpreter's prefix when it lives outside
  ``/usr``, a fresh ``/proc`` of the new PID namespace, a minimal ``/dev``, an empty ``/tmp``
  and the workspace, which is the only writable host path, mounted at its own path;
* a new session (``--new-session``: no terminal to inject into) whose processes all die with the
  sandbox: when the command exits, times out or the server dies (``--die-with-parent``), PID 1
  of the namespace goes and the kernel kills everything left in it, ``setsid`` or not;
* ``prlimit`` limits on address space, CPU time, file size and the number of processes.

Whether bwrap works is probed once (``bwrap_probe``): a machine without it, or a container that
forbids user namespaces, falls back to ``LocalSandbox`` unless ``OPENRATH_SANDBOX=bwrap``
requires it (see ``sessions_app.sandbox.select``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from sessions_app.sandbox.local import SAFE_PATH, LocalSandbox, limit_arguments
from sessions_app.tools.policy import ToolPolicy

#: The uid and gid commands run as inside the sandbox (``nobody``), with no capabilities.
SANDBOX_UID = 65534
SANDBOX_HOSTNAME = "openrath-sandbox"
#: What of /etc is visible: enough for sh, Python, name lookups of users and TLS certificates.
ETC_FILES = (
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
)
#: Only with network access: name resolution.
NETWORK_ETC_FILES = ("/etc/resolv.conf", "/etc/gai.conf", "/etc/host.conf")
#: Top-level directories that are links into /usr on merged-/usr systems, or small real ones.
ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
PROBE_TIMEOUT_SECONDS = 20.0


def bwrap_path() -> str | None:
    """The bwrap executable (``OPENRATH_BWRAP`` or bwrap on the system ``PATH``)."""
    configured = os.environ.get("OPENRATH_BWRAP", "").strip()
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("bwrap", path=SAFE_PATH)


@dataclass(frozen=True)
class BwrapProbe:
    """Whether bwrap can build the sandbox on this machine, and why not."""

    ok: bool
    path: str | None
    detail: str
    disable_userns: bool = False


def _supports(path: str, option: str) -> bool:
    try:
        result = subprocess.run(  # noqa: S603 - a fixed argv
            [path, "--help"],
            env={"PATH": SAFE_PATH},
            capture_output=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option.encode() in result.stdout + result.stderr


def bwrap_probe() -> BwrapProbe:
    """Run the exact sandbox this module builds around ``true``, once; the outcome."""
    path = bwrap_path()
    if path is None:
        return BwrapProbe(
            False, None, "bwrap is not installed (Debian: apt-get install bubblewrap)"
        )
    disable_userns = _supports(path, "--disable-userns")
    with tempfile.TemporaryDirectory(prefix="openrath-bwrap-probe-") as workspace:
        sandbox = BwrapSandbox(workspace, ToolPolicy(), bwrap=path, disable_userns=disable_userns)
        argv = sandbox.launch(["/bin/sh", "-c", "test -w ."], 10)
        try:
            result = subprocess.run(  # noqa: S603 - argv is built here
                argv,
                cwd=workspace,
                env=sandbox.environment(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return BwrapProbe(False, path, f"{path} could not run: {type(exc).__name__}: {exc}")
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", errors="replace").strip()[-300:]
        return BwrapProbe(
            False,
            path,
            f"{path} cannot build the sandbox here (exit {result.returncode}): "
            f"{message or 'no message'}",
        )
    return BwrapProbe(True, path, f"{path} works", disable_userns=disable_userns)


class BwrapSandbox(LocalSandbox):
    """A workspace directory whose commands run in a bubblewrap sandbox."""

    name = "bwrap"

    def __init__(
        self,
        root: str | os.PathLike[str],
        policy: ToolPolicy | None = None,
        *,
        bwrap: str,
        disable_userns: bool = False,
    ) -> None:
        super().__init__(root, policy)
        self.bwrap = bwrap
        self.disable_userns = disable_userns

    def __repr__(self) -> str:
        return f"<BwrapSandbox root={self.root!r}>"

    def python_executable(self) -> str:
        # The interpreter itself, not a virtualenv's link to it: the venv is not in the sandbox.
        return os.path.realpath(sys.executable)

    def mounts(self) -> list[str]:
        """bwrap's filesystem arguments: the read-only minimal root, then the workspace."""
        arguments = ["--ro-bind", "/usr", "/usr"]
        for entry in ROOT_LINKS:
            if os.path.islink(entry):
                arguments += ["--symlink", os.readlink(entry), entry]
            elif os.path.isdir(entry):
                arguments += ["--ro-bind", entry, entry]
        etc = ETC_FILES + (NETWORK_ETC_FILES if self.policy.network else ())
        for entry in etc:
            arguments += ["--ro-bind-try", entry, entry]
        prefix = os.path.realpath(sys.base_prefix)
        if not _under(prefix, "/usr"):
            arguments += ["--ro-bind", prefix, prefix]
        arguments += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]  # noqa: S108
        # Last, so a workspace under /tmp (or /usr) is mounted over what came before.
        arguments += ["--bind", self.root, self.root, "--chdir", self.root]
        return arguments

    def launch(self, argv: list[str], timeout: float) -> list[str]:
        namespaces = ["--unshare-all", "--unshare-user"]
        if self.policy.network:
            namespaces.append("--share-net")
        identity = ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL"]
        if self.disable_userns:
            identity.append("--disable-userns")
        lifetime = ["--die-with-parent", "--new-session", "--hostname", SANDBOX_HOSTNAME]
        environment = ["--clearenv"]
        for key, value in self.environment().items():
            environment += ["--setenv", key, value]
        return [
            self.bwrap,
            *namespaces,
            *identity,
            *lifetime,
            *self.mounts(),
            *environment,
            "--",
            *limit_arguments(self.policy, timeout, processes=True),
            *argv,
        ]


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")
