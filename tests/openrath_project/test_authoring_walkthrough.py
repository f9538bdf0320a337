"""docs/authoring.md, "Registering a workflow", run as written (issue 18 item 3).

The section's module is written to ``~/flows/refunds.py`` (``HOME`` is a temporary directory),
its ``export`` line is run before the quickstart (``manage.py quickstart``: what
``./deploy/bin/quickstart`` runs once the project is installed) on a free port of 127.0.0.1,
and its steps 4 and 5 are run by bash as one shell session, with the port the only change.

The server starts with no embedded worker, and a ``run_worker`` beside it starts only once the
commands are seen waiting on a queued run: so their wait for the approval is exercised every
time, whatever the machine's speed (a command that read the interrupt list once would find it
empty and fail).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from benchmarks._common import free_ports
from tests.support import REPO

pytestmark = pytest.mark.slow

DOC = REPO / "docs" / "authoring.md"
SECTION = "Registering a workflow"
GENEROUS_SECONDS = 300  # a loaded machine; the commands themselves wait up to 2 x 120 s


def _section_blocks() -> tuple[str, list[str]]:
    """The section's Python module and its bash blocks, in order."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {SECTION}\n")
    end = text.index("\n## ", start + 1)
    blocks = re.findall(r"```(\w+)\n(.*?)```", text[start:end], flags=re.DOTALL)
    python = [body for lang, body in blocks if lang == "python"]
    bash = [body for lang, body in blocks if lang == "bash"]
    assert len(python) == 1, python
    return python[0], bash


def _get(url: str, token: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - localhost
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _wait(predicate: Any, what: str, *, seconds: float = GENEROUS_SECONDS) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_the_registration_walkthrough_runs_as_written(tmp_path):
    module, bash = _section_blocks()
    export, run_it, approve_it = bash  # step 2, step 4, step 5
    assert export.strip().startswith("export PYTHONPATH=~/flows OPENRATH_WORKFLOW_MODULES=")

    home = tmp_path / "home"
    (home / "flows").mkdir(parents=True)
    (home / "flows" / "refunds.py").write_text(module, encoding="utf-8")
    (port,) = free_ports(1)
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith("OPENRATH_")
            and k not in ("DATABASE_URL", "REDIS_URL", "PYTHONPATH", "DJANGO_SETTINGS_MODULE")
        },
        "HOME": str(home),
        "OPENRATH_DATA_DIR": str(tmp_path / "data"),
        "OPENRATH_PROFILE": "embedded",
        "OPENRATH_EMBEDDED_WORKERS": "0",  # the worker comes later (see the module docstring)
        "PYTHONUNBUFFERED": "1",
    }
    server_log = tmp_path / "server.log"
    worker_log = tmp_path / "worker.log"
    processes: list[subprocess.Popen[bytes]] = []

    def start(script: str, log: Path, **extra: str) -> subprocess.Popen[bytes]:
        with log.open("wb") as handle:
            process = subprocess.Popen(
                ["bash", "-c", script],
                cwd=REPO,
                env={**env, **extra},
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        processes.append(process)
        return process

    python = sys.executable
    server = start(f"{export}\nexec {python} manage.py quickstart --port {port}\n", server_log)
    try:

        def token() -> str | None:
            assert server.poll() is None, server_log.read_text()
            found = re.search(r"^  API token\s+: (\S+)", server_log.read_text(), re.MULTILINE)
            return found[1] if found else None

        raw = _wait(token, "the quickstart's token")
        base = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            assert server.poll() is None, server_log.read_text()
            try:
                return _get(f"{base}/readyz", raw)[0] == 200
            except OSError:
                return False

        _wait(answers, "the server")
        assert "refund" in [w["name"] for w in _get(f"{base}/api/v1/workflows/", raw)[1]["results"]]

        commands = (run_it + approve_it).replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        assert "127.0.0.1:8000" not in commands
        commands_log = tmp_path / "commands.log"
        shell = start(commands, commands_log, TOKEN=raw)

        def queued_refund() -> dict[str, Any] | None:
            runs = _get(f"{base}/api/v1/runs/", raw)[1]["results"]
            return next((r for r in runs if r["workflow"] == "refund"), None)

        run = _wait(queued_refund, "the refund run")
        assert run["status"] == "queued"  # no worker yet: the approval cannot exist
        time.sleep(2)  # a command that did not wait would have read the empty list and gone on
        assert shell.poll() is None, commands_log.read_text()
        status, pending = _get(f"{base}/api/v1/interrupts/?run={run['id']}", raw)
        assert (status, pending["results"]) == (200, [])

        worker = start(f"{export}\nexec {python} manage.py run_worker --threads 2\n", worker_log)

        def commands_done() -> bool:
            assert worker.poll() is None, worker_log.read_text()
            assert server.poll() is None, server_log.read_text()
            return shell.poll() is not None

        _wait(commands_done, "the commands")
        assert shell.returncode == 0, commands_log.read_text()
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=60)

    lines = commands_log.read_text().strip().splitlines()
    assert lines[0].startswith("the approval (id, digest): "), lines
    interrupt_id, digest = lines[0].split(": ", 1)[1].split()
    resolved = json.loads(lines[1])
    assert (resolved["id"], resolved["status"]) == (interrupt_id, "resolved"), resolved
    assert resolved["request_digest"] == digest
    status, _, output = lines[-1].partition(" ")  # the doc prints the status and the output
    assert status == "succeeded", lines
    assert ast.literal_eval(output) == {
        "order": "A17",
        "amount": 42,
        "approved_by": resolved["resolved_by"],
        "receipt": {"order": "A17", "amount": 42, "status": "refunded"},
    }
    ledger = (home / "flows" / "refunds.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in ledger] == [{"order": "A17", "amount": 42}]
    for log in (server_log, worker_log):
        assert "Traceback" not in log.read_text(), log.read_text()
