"""Issue 18 item 3: workflow modules that cannot be imported are one readable line, once.

Every process that runs or starts workflows refuses to start on it, exits non-zero and prints
the module, the cause and the fix (``openrath_project.startup``): ``quickstart``, ``serve``,
``run_worker``, the Celery worker and ``uvicorn openrath_project.asgi:application`` (its
lifespan start-up fails). No traceback, no worker looping on it. A server started without the
lifespan protocol serves a 503 ``/readyz`` naming it. Real processes throughout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from benchmarks._common import free_ports
from runs_app.registry import REGISTERING_DOC
from tests.support import REPO

pytestmark = pytest.mark.slow

MODULE = "h8_missing_flows"  # on no path
#: The cause and the fix, as each process prints them after "Refusing to start <process>: ".
PROBLEM = (
    f"cannot import workflow module {MODULE!r}: no module named {MODULE!r} on the Python path. "
    "Put the directory that holds it on PYTHONPATH (or install it into the project's "
    "environment), then restart the server and its workers; see docs/authoring.md, "
    "'Registering a workflow'"
)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "OPENRATH_PROFILE", "PYTHONPATH")
    }
    return {
        **base,
        "OPENRATH_DATA_DIR": str(tmp_path / "data"),
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "OPENRATH_PROFILE": "embedded",
        "OPENRATH_WORKFLOW_MODULES": MODULE,
        "PYTHONPATH": str(REPO),
        **extra,
    }


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False
    )


def _manage(*args: str) -> list[str]:
    return [sys.executable, "manage.py", *args]


@pytest.mark.parametrize(
    ("args", "process"),
    [
        (("quickstart", "--no-serve"), "the quickstart"),
        (("serve", "--port", "1"), "the server"),  # refused before it binds anything
        (("run_worker", "--idle-exit", "1"), "the worker"),
    ],
    ids=["quickstart", "serve", "run_worker"],
)
def test_a_command_refuses_with_one_command_error_line(tmp_path, args, process):
    result = _run(_manage(*args), _env(tmp_path))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"CommandError: Refusing to start {process}: {PROBLEM}"]
    # Refused before anything was set up: no database, so no demo tenant, login or token.
    assert not (tmp_path / "data" / "db.sqlite3").exists()


def test_the_celery_worker_refuses_with_one_line(tmp_path):
    result = _run(
        [sys.executable, "-m", "celery", "-A", "openrath_project", "worker", "--pool", "solo"],
        _env(tmp_path),
    )
    assert result.returncode == 1
    lines = (result.stdout + result.stderr).splitlines()
    assert f"Refusing to start the Celery worker: {PROBLEM}" in lines
    assert "Traceback" not in result.stderr, result.stderr
    assert MODULE not in "\n".join(line for line in lines if "Refusing to start" not in line)


def test_uvicorn_lifespan_start_up_fails_with_the_line_and_exits(tmp_path):
    (port,) = free_ports(1)
    result = _run(
        [sys.executable, "-m", "uvicorn", "openrath_project.asgi:application", "--port", str(port)],
        _env(tmp_path, OPENRATH_EMBEDDED_WORKERS="2"),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 3, output  # uvicorn's status for a failed start-up
    assert output.count(MODULE) == 2, output  # the one line names it twice: module and cause
    assert f"ERROR:    Refusing to start the ASGI web process: {PROBLEM}" in output.splitlines()
    assert "Application startup failed. Exiting." in output
    assert "Traceback" not in output
    assert "failed while executing a run" not in output  # no worker started, none looped


def _get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 - localhost
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_without_the_lifespan_readyz_is_503_naming_the_module(tmp_path):
    (port,) = free_ports(1)
    log = tmp_path / "server.log"
    env = _env(tmp_path)
    subprocess.run(_manage("migrate", "-v0"), cwd=REPO, env=env, check=True, timeout=180)
    with log.open("wb") as handle:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "openrath_project.asgi:application",
                "--port",
                str(port),
                "--lifespan",
                "off",
            ],
            cwd=REPO,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/readyz")
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                assert server.poll() is None, log.read_text()
                time.sleep(0.3)
        assert status == 503
        assert body["failed"] == ["workflows"]
        assert body["checks"]["workflows"]["ok"] is False  # type: ignore[index]
        assert body["checks"]["workflows"]["error"] == f"RuntimeError: {PROBLEM}"  # type: ignore[index]
        assert body["workers"]["can_claim"] is False  # type: ignore[index]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "Traceback" not in log.read_text()


def test_the_section_the_message_names_exists():
    match = re.fullmatch(r"(?P<path>[\w/.-]+\.md), '(?P<title>[^']+)'", REGISTERING_DOC)
    assert match, REGISTERING_DOC
    doc = (REPO / match["path"]).read_text(encoding="utf-8")
    headings = [line.lstrip("#").strip() for line in doc.splitlines() if line.startswith("#")]
    assert match["title"] in headings
    assert match["title"] in PROBLEM  # and it is the one the message names
