"""Issue 14, item 7, end to end: a real embedded server (web and workers in one process) started
with secrets in its *initial* environment, the one ``/proc/<pid>/environ`` shows, runs a
workflow whose ``run_shell`` and ``run_python`` tools read ``/proc/$PPID/environ`` and
``/proc/1/environ`` and try the database and Redis ports. Under bubblewrap, the product's
default where it works, nothing of the worker's reaches the tool or the stored run.

Without a working bubblewrap this skips locally and fails under ``CI=true``.
"""

from __future__ import annotations

import json
import secrets
import tempfile
import time
import urllib.request
from typing import Any

import pytest

from benchmarks import fuzz
from sessions_app.sandbox import bwrap_probe
from tests.hardening import sandbox_workflows
from tests.support import service_missing

pytestmark = pytest.mark.slow

SANDBOX_ENV = ["PATH", "HOME", "LANG", "TMPDIR"]
TERMINAL = {"succeeded", "failed", "cancelled", "timed_out"}


def _get(base: str, path: str, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"{base}{path}", headers=headers)  # noqa: S310 - localhost
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return json.loads(response.read().decode())


def _post(base: str, path: str, token: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(  # noqa: S310 - localhost only
        f"{base}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return json.loads(response.read().decode())


def _names(environ_text: str) -> list[str]:
    return [line.split("=", 1)[0] for line in environ_text.splitlines() if "=" in line]


def test_a_served_workers_tools_see_none_of_its_secrets(monkeypatch):
    probe = bwrap_probe()
    if not probe.ok:
        service_missing(f"needs bubblewrap (apt-get install -y bubblewrap): {probe.detail}")
    canaries = {
        "OPENAI_API_KEY": f"sk-canary-{secrets.token_hex(16)}",
        "SECRET_KEY": f"canary-secret-key-{secrets.token_urlsafe(40)}",
        "OPENRATH_CANARY_SECRET": f"canary-{secrets.token_hex(16)}",
    }
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPENRATH_WORKFLOW_MODULES", sandbox_workflows.__name__)
    monkeypatch.setenv("OPENRATH_SANDBOX", "bwrap")
    server, base, tokens, _env = fuzz.start_server(tempfile.mkdtemp(prefix="openrath-sandbox-"))
    try:
        token = tokens["all"]
        ready = _get(base, "/readyz")
        assert ready["sandbox"]["backend"] == "bwrap", ready
        run = _post(
            base,
            "/api/v1/runs/",
            token,
            {"workflow": "sandbox_secrets", "project": "fuzz", "user_message": "probe"},
        )
        deadline = time.monotonic() + 180  # generous: the machine is shared
        while run["status"] not in TERMINAL and time.monotonic() < deadline:
            time.sleep(0.2)
            run = _get(base, f"/api/v1/runs/{run['id']}/", token)
        chunks = _get(base, f"/api/v1/sessions/{run['session']}/chunks/?limit=200", token)
    finally:
        server.terminate()
        server.wait(timeout=30)

    assert run["status"] == "succeeded", run
    state = run["state"]
    assert state["errors"] == [None, None]
    shell, python = state["outputs"]
    assert shell["exit_code"] == 0, shell
    parent, pid1, count = shell["stdout"].split("---\n")
    # The reads happened and found the sandbox's own four variables, nothing of the worker's.
    assert _names(parent) == SANDBOX_ENV
    assert _names(pid1) == SANDBOX_ENV
    assert int(count) <= 6  # bwrap's init and this pipeline, not the host's processes
    assert python["exit_code"] == 0, python
    assert _names(python["stdout"]) == SANDBOX_ENV
    ports = [line.split() for line in python["stdout"].splitlines() if line.startswith("port ")]
    assert [port for _, port, _ in ports] == ["5432", "6379"]
    assert all(code != "0" for _, _, code in ports)  # no network namespace, no connection
    stored = json.dumps([run, chunks])
    for value in canaries.values():
        assert value not in stored
