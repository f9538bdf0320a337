"""Item 1 end to end: a plain script and a running server on one data directory.

A real ``manage.py serve`` (embedded profile, two embedded worker threads, the fan-out workflow
registered in it too, so its workers could run it) shares ``OPENRATH_DATA_DIR`` with a script
that submits a run with two parallel branches and executes it with ``LocalRuntime``. The rule
under test: the server's workers leave the library tenant's runs to the script, so every claim
of the parent and of both branch runs is the script's, and the run succeeds. The script leaves
each queued run waiting for 2 s (four of the server's worker polls) before it claims it: with
the server's ``OPENRATH_LIBRARY_TENANT`` set to another name (its workers then treat ``local``
as any tenant) the same script's runs were all claimed by ``embedded:...`` workers (checked by
hand), which is what this test would see without the rule.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.compat.test_zero_setup import ROOT, _plain_env

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _workers_can_claim(url: str) -> bool:
    with (
        contextlib.suppress(OSError, ValueError),
        urllib.request.urlopen(f"{url}/readyz", timeout=2) as response,  # noqa: S310
    ):
        return bool(json.load(response)["workers"]["can_claim"])
    return False


def test_the_servers_workers_leave_a_scripts_branch_runs_to_it(tmp_path):
    env = _plain_env(
        tmp_path / "data",
        OPENRATH_WORKFLOW_MODULES="tests.compat.scripts.fanout_workflow",
        OPENRATH_EMBEDDED_WORKERS="2",
    )
    # `manage.py serve` does not migrate (the quickstart and a script's first use do).
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert migrate.returncode == 0, migrate.stderr
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not _workers_can_claim(url):
            assert server.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "no embedded worker came up:\n" + (
                log_path.read_text()
            )
            time.sleep(0.2)

        script = subprocess.run(
            [sys.executable, str(SCRIPTS / "script_beside_server.py")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert script.returncode == 0, script.stderr
        assert script.stdout.splitlines() == [
            "status: succeeded state: {'sides': ('left', 'right')}",
            "runs: 3 claimed by: ['script']",
        ]
        assert server.poll() is None  # the server was up the whole time
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert "Traceback" not in log_path.read_text()
