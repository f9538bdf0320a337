"""``BwrapSandbox`` with real bubblewrap (issue 14, item 7): no worker secrets, no network, no
host processes, only the workspace writable, everything killed at the end, resource limits.

Without a working ``/usr/bin/bwrap`` these tests skip locally and fail under ``CI=true``
(``.ci/run`` and ``deploy/bin/test`` install Debian's ``bubblewrap``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sessions_app.sandbox import BwrapSandbox, LocalSandbox, SandboxViolation, bwrap_probe
from sessions_app.tools import ToolPolicy
from tests.support import REPO, process_alive, service_missing

SECRETS = {
    "OPENAI_API_KEY": "sk-worker-secret-0001",
    "SECRET_KEY": "django-secret-0002",
    "DATABASE_URL": "postgres://runtime:pw-0003@127.0.0.1:5432/prod",
    "S3_SECRET_ACCESS_KEY": "s3-secret-0004",
    "REDIS_URL": "redis://:pw-0005@127.0.0.1:6379/0",
}
SANDBOX_ENV = ["PATH", "HOME", "LANG", "TMPDIR"]


@pytest.fixture(scope="module")
def probe():
    result = bwrap_probe()
    if not result.ok:
        service_missing(f"needs bubblewrap (apt-get install -y bubblewrap): {result.detail}")
    return result


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "workspace"


def make(root: Path, probe, **policy) -> BwrapSandbox:
    return BwrapSandbox(
        root,
        ToolPolicy(**{"command_timeout_seconds": 20, **policy}),
        bwrap=probe.path,
        disable_userns=probe.disable_userns,
    )


@pytest.fixture
def sandbox(root: Path, probe) -> BwrapSandbox:
    return make(root, probe)


def _host_processes_with(token: str) -> list[int]:
    """Live host processes whose command line contains ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline and int(entry) != os.getpid() and process_alive(int(entry)):
            found.append(int(entry))
    return found


def _wait_gone(token: str, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _host_processes_with(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# -- secrets -----------------------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import json, sys
    from sessions_app.sandbox import BwrapSandbox, LocalSandbox
    from sessions_app.tools import ToolPolicy

    kind, root, bwrap, disable = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    policy = ToolPolicy(command_timeout_seconds=20)
    if kind == "bwrap":
        box = BwrapSandbox(root, policy, bwrap=bwrap, disable_userns=disable)
    else:
        box = LocalSandbox(root, policy)
    read = (
        "tr '\\\\0' '\\\\n' < /proc/$PPID/environ; echo ---; "
        "tr '\\\\0' '\\\\n' < /proc/1/environ"
    )
    shell = box.run_shell(read)
    python = box.run_python(
        "import os\\n"
        "print(open(f'/proc/{os.getppid()}/environ').read().replace(chr(0), chr(10)))"
    )
    print(json.dumps({"shell": shell.stdout, "python": python.stdout}))
    """
)


def _tool_output_in_a_worker(kind: str, root: Path, probe) -> dict[str, str]:
    """Run the tools inside a fresh worker process whose *initial* environment holds secrets
    (what ``/proc/<pid>/environ`` shows), as a production worker's does."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **SECRETS}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            WORKER,
            kind,
            str(root),
            probe.path,
            "1" if probe.disable_userns else "0",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_tools_cannot_read_the_workers_environment(root: Path, probe) -> None:
    out = _tool_output_in_a_worker("bwrap", root, probe)

    parent, pid1 = out["shell"].split("---\n")
    for text in (parent, pid1, out["python"]):
        for value in SECRETS.values():
            assert value not in text
        names = [line.split("=", 1)[0] for line in text.splitlines() if "=" in line]
        assert names == SANDBOX_ENV


def test_the_local_fallback_does_leak_them(root: Path, probe) -> None:
    """Why bwrap is the default: the same tool under the path-confined backend reads the
    worker's environment through /proc (the finding of issue 14)."""
    out = _tool_output_in_a_worker("local", root, probe)
    assert SECRETS["OPENAI_API_KEY"] in out["shell"]


# -- network, processes, filesystem ------------------------------------------------------------


def _listening(port: int) -> bool:
    with socket.socket() as probe_socket:
        probe_socket.settimeout(2)
        return probe_socket.connect_ex(("127.0.0.1", port)) == 0


CONNECT = (
    "import socket, sys\n"
    "for port in (5432, 6379):\n"
    "    s = socket.socket(); s.settimeout(3)\n"
    "    print(port, s.connect_ex(('127.0.0.1', port)))\n"
)


def test_no_network_unless_the_policy_grants_it(root: Path, probe) -> None:
    listening = [port for port in (5432, 6379) if _listening(port)]
    if not listening:
        service_missing("needs PostgreSQL or Redis listening on 127.0.0.1 to prove isolation")

    closed = make(root, probe).run_python(CONNECT)
    granted = make(root, probe, network=True).run_python(CONNECT)

    codes = dict(line.split() for line in closed.stdout.splitlines())
    assert closed.exit_code == 0, closed.stderr
    assert all(codes[str(port)] != "0" for port in (5432, 6379))
    granted_codes = dict(line.split() for line in granted.stdout.splitlines())
    assert [port for port in listening if granted_codes[str(port)] == "0"] == listening


def test_host_processes_are_invisible(sandbox: BwrapSandbox) -> None:
    worker = os.getpid()
    result = sandbox.run_shell(
        f"ls /proc | grep -c '^[0-9]'; kill -0 {worker} 2>/dev/null && echo reached; "
        "cat /proc/1/cmdline | tr '\\0' ' ' | cut -d' ' -f1; hostname; id -u"
    )
    count, *rest = result.stdout.splitlines()
    # PID 1 (bwrap's init), the shell, and what it runs in this pipeline: a handful, not the host.
    assert int(count) <= 6
    assert rest == [sandbox.bwrap, "openrath-sandbox", "65534"]


def test_only_the_workspace_is_writable(sandbox: BwrapSandbox, root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    data_dir = REPO / ".openrath"
    command = (
        "touch inside.txt && echo inside-ok; "
        f"cat {outside} 2>/dev/null || echo outside-invisible; "
        f"echo x > {outside} 2>/dev/null; "
        "touch /usr/evil 2>/dev/null || echo usr-refused; "
        "echo x >> /etc/passwd 2>/dev/null || echo etc-refused; "
        f"ls {REPO} >/dev/null 2>&1 || echo repo-invisible; "
        f"ls {data_dir} >/dev/null 2>&1 || echo data-dir-invisible; "
        "for d in /home /var /sys /run /opt /srv /mnt /boot; do test -e $d && echo seen $d; done; "
        "echo host-dirs-invisible; "
        "touch /tmp/scratch && echo tmp-private"
    )
    result = sandbox.run_shell(command)

    assert result.stdout.splitlines() == [
        "inside-ok",
        "outside-invisible",
        "usr-refused",
        "etc-refused",
        "repo-invisible",
        "data-dir-invisible",
        "host-dirs-invisible",
        "tmp-private",
    ], result.stderr
    assert (root / "inside.txt").exists()
    # The write above went to the sandbox's private /tmp, not to the host's file.
    assert outside.read_text() == "host file"
    assert not Path("/usr/evil").exists()
    assert not Path("/tmp/scratch").exists()


def test_file_tools_refuse_a_link_a_command_made(sandbox: BwrapSandbox) -> None:
    assert sandbox.run_shell("ln -s /etc/hostname escape").exit_code == 0
    with pytest.raises(SandboxViolation, match="outside the workspace"):
        sandbox.read_file("escape")


# -- lifetime -----------------------------------------------------------------------------------


def test_a_setsid_child_dies_at_the_timeout(root: Path, probe) -> None:
    sandbox = make(root, probe, command_timeout_seconds=1)
    token = "987.6543"
    started = time.monotonic()

    result = sandbox.run_shell(
        f"setsid sh -c 'trap \"\" TERM; sleep {token}' & trap '' TERM; sleep {token}"
    )

    assert result.timed_out is True
    # Far below the 987 s sleep: the 1 s limit ended it (the margin is for a loaded machine).
    assert time.monotonic() - started < 120
    assert _wait_gone(token, seconds=60) == []


def test_a_setsid_child_does_not_outlive_a_finished_command(root: Path, probe) -> None:
    sandbox = make(root, probe)
    token = "876.5432"

    result = sandbox.run_shell(f"setsid sleep {token} & nohup sleep {token} & echo started")

    assert (result.exit_code, result.stdout, result.timed_out) == (0, "started\n", False)
    assert _wait_gone(token) == []


def test_the_local_fallback_lets_a_setsid_child_escape(root: Path) -> None:
    """The documented limit of the fallback, and what the PID namespace fixes."""
    token = "765.4321"
    LocalSandbox(root, ToolPolicy(command_timeout_seconds=30)).run_shell(
        # The command returns once the child has left its session (it wrote its pid after
        # setsid), so the group kill that follows cannot catch it first.
        f"setsid sh -c 'echo $$ > escaped.pid; exec sleep {token}' >/dev/null 2>&1 </dev/null & "
        "while [ ! -s escaped.pid ]; do sleep 0.05; done"
    )
    escaped = int((root / "escaped.pid").read_text())
    try:
        assert process_alive(escaped) is True
    finally:
        for pid in _host_processes_with(token):
            os.kill(pid, 9)


# -- limits -------------------------------------------------------------------------------------


def test_memory_limit(root: Path, probe) -> None:
    sandbox = make(root, probe, max_memory_bytes=256 * 1024**2)
    result = sandbox.run_python("block = bytearray(512 * 1024 * 1024); print('allocated')")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "MemoryError" in result.stderr


def test_file_size_limit(root: Path, probe) -> None:
    sandbox = make(root, probe, max_file_bytes=1_000_000)
    result = sandbox.run_shell("head -c 3000000 /dev/zero > big.bin; echo status=$?")
    assert "status=153" in result.stdout  # 128 + SIGXFSZ
    assert (root / "big.bin").stat().st_size == 1_000_000


def test_process_and_cpu_limits_are_set(root: Path, probe) -> None:
    sandbox = make(root, probe, max_processes=64, command_timeout_seconds=7)
    result = sandbox.run_python(
        "import resource as r\n"
        "for name in ('RLIMIT_NPROC', 'RLIMIT_CPU', 'RLIMIT_CORE'):\n"
        "    print(*r.getrlimit(getattr(r, name)))"
    )
    assert result.stdout.splitlines() == ["64 64", "8 9", "0 0"], result.stderr


def test_output_is_capped(root: Path, probe) -> None:
    sandbox = make(root, probe, max_output_bytes=1_000)
    result = sandbox.run_shell("yes | head -c 5000000")
    assert result.exit_code == 0
    assert result.truncated is True
    assert result.stdout == "y\n" * 375 + "\n…[truncated 4999000 bytes]…\n" + "y\n" * 125


def test_commands_see_the_workspace_as_in_the_local_backend(
    sandbox: BwrapSandbox, root: Path
) -> None:
    result = sandbox.run_shell("pwd; cat; echo done; echo oops >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, f"{root}\ndone\n", "oops\n")
    python = sandbox.run_python("import os, sys; print(os.getcwd()); print(sys.flags.isolated)")
    assert python.stdout == f"{root}\n1\n"
    big = sandbox.run_python("x = 1\n" * 25_000 + "print(x + 1)\n")
    assert (big.exit_code, big.stdout) == (0, "2\n")
    assert list((root / ".tmp").iterdir()) == []
