"""The README's main command, without serving: idempotent set-up that prints a working token."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from tests.support import REPO, run_manage


def _printed_token(stdout: str) -> str:
    line = next(line for line in stdout.splitlines() if line.strip().startswith("API token"))
    return line.split(":", 1)[1].split()[0]


def _projects_with(token: str, env: dict[str, str]) -> str:
    check = run_manage(
        "shell",
        "-c",
        "from django.test import Client; "
        f"r = Client().get('/api/v1/projects/', HTTP_AUTHORIZATION='Bearer {token}', "
        "HTTP_HOST='localhost'); "
        "print(r.status_code, [p['slug'] for p in r.json().get('results', [])])",
        env=env,
    )
    return check.stdout.strip().splitlines()[-1]


def test_quickstart_sets_up_and_prints_a_working_token(tmp_path):
    env = {"OPENRATH_DATA_DIR": str(tmp_path), "DATABASE_URL": ""}
    first = run_manage("quickstart", "--no-serve", "--no-demo", env=env)
    assert first.returncode == 0, first.stderr
    token = _printed_token(first.stdout)
    assert token.startswith("ort_")
    assert "replaces the previous demo token" not in first.stdout
    assert (tmp_path / "db.sqlite3").exists()
    assert _projects_with(token, env) == "200 ['demo']"


def test_a_second_quickstart_rotates_the_demo_token(tmp_path):
    """Re-running prints a new token and revokes the one printed before (not a pile of live
    all-grants tokens)."""
    env = {"OPENRATH_DATA_DIR": str(tmp_path), "DATABASE_URL": ""}
    first = run_manage("quickstart", "--no-serve", "--no-demo", env=env)
    assert first.returncode == 0, first.stderr
    old = _printed_token(first.stdout)
    again = run_manage("quickstart", "--no-serve", "--no-demo", env=env)
    assert again.returncode == 0, again.stderr
    new = _printed_token(again.stdout)
    assert new != old
    old_prefix = old.removeprefix("ort_").split("_", 1)[0]
    assert f"now revoked: prefix {old_prefix}" in again.stdout, again.stdout
    assert _projects_with(old, env) == "401 []"
    assert _projects_with(new, env) == "200 ['demo']"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _call(method: str, url: str, token: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(  # noqa: S310 (a test's own http://127.0.0.1 URL)
        url,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
        return json.loads(response.read())


def _wait_for(check: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (urllib.error.URLError, ConnectionError):
            last = None
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def test_quickstart_serves_the_demo_run_an_operator_approves(tmp_path):
    """The README's tour: the served quickstart runs the research team up to its approval; an
    approval through the API finishes it and publishes the report exactly once."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
            "OPENRATH_DATA_DIR": str(tmp_path),
            "DATABASE_URL": "",
            "OPENRATH_WORKFLOW_MODULES": "openrath_project.examples.research_team",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("OPENAI_API_KEY", None)
    log = tmp_path / "quickstart.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "quickstart", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        printed = _wait_for(
            lambda: "demo run" in log.read_text() and log.read_text(), 240, "the quickstart banner"
        )
        fields = {
            line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
            for line in printed.splitlines()
            if line.startswith("  ") and ":" in line
        }
        token = fields["API token"]
        run_id = fields["demo run"].split("/console/runs/")[1].split("/")[0]
        assert "/console/sessions/" in fields["its lineage"]
        api = f"http://127.0.0.1:{port}/api/v1"
        pending = _wait_for(
            lambda: _call("GET", f"{api}/interrupts/?state=pending", token)["results"],
            240,
            "the demo's approval",
        )
        (interrupt,) = pending
        assert interrupt["run"] == run_id
        assert not (tmp_path / "reports" / f"{run_id}.md").exists()
        _call(
            "POST",
            f"{api}/interrupts/{interrupt['id']}/resolve/",
            token,
            {
                "decision": "approve",
                "reason": "read it",
                "request_digest": interrupt["request_digest"],
            },
        )
        run = _wait_for(
            lambda: (
                (r := _call("GET", f"{api}/runs/{run_id}/", token))["status"]
                in ("succeeded", "failed", "cancelled")
                and r
            ),
            240,
            "the demo run to end",
        )
        assert run["status"] == "succeeded", run
        report = (tmp_path / "reports" / f"{run_id}.md").read_text()
        assert report.startswith("# Research report")
        assert "launch in Europe" in report
        effects = _call("GET", f"{api}/effects/?run={run_id}", token)["results"]
        assert [e["status"] for e in effects] == ["succeeded"], effects
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    # A second quickstart shows the same demo run rather than starting another.
    again = run_manage(
        "quickstart", "--no-serve", env={k: env[k] for k in ("OPENRATH_DATA_DIR", "DATABASE_URL")}
    )
    assert f"/console/runs/{run_id}/" in again.stdout, again.stdout + again.stderr
    # ... in its current state: decided, so nothing tells the operator to approve it.
    assert "research_team, succeeded)" in again.stdout, again.stdout
    assert "approve it at" not in again.stdout
    assert "(written)" in again.stdout
