"""Issue 18 items 4 and 5: the ASGI entry point as servers run it (``uvicorn
openrath_project.asgi:application``), in real processes.

* Embedded: the lifespan starts the in-process workers, so a queued run finishes, and
  ``/readyz`` says the workers can claim.
* Production with the database unreachable at start: ``/healthz`` answers, ``/readyz`` and
  the API answer 503 with one readable line in the log (no traceback); once the database answers
  the migrations are checked and requests are served. A worker exits with one line instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from benchmarks._common import manage
from benchmarks.fuzz import free_port
from tests.openrath_project.test_profiles import GOOD
from tests.support import REPO, require_postgres, run_manage

pytestmark = pytest.mark.slow


def _get(url: str, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)  # noqa: S310 - localhost only
    # As behind the TLS-terminating ingress (uvicorn trusts 127.0.0.1's proxy headers): the
    # production profile redirects plain HTTP to HTTPS.
    request.add_header("X-Forwarded-Proto", "https")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
            return response.status, _body(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _body(exc.read())


def _body(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError:  # an HTML page
        return raw.decode(errors="replace")


def _post(url: str, token: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(  # noqa: S310 - localhost only
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return response.status, json.loads(response.read())


def _uvicorn(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "openrath_project.asgi:application", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )


def _wait_for(predicate: Any, seconds: float = 120) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.3)


def _answers(base: str) -> bool:
    try:
        return _get(f"{base}/healthz")[0] == 200
    except OSError:
        return False


def test_uvicorn_on_the_embedded_profile_runs_queued_runs(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
        "OPENRATH_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "OPENRATH_PROFILE": "embedded",
        "OPENRATH_WORKFLOW_MODULES": "tests.openrath_project.observability_workflows",
        "OPENRATH_EMBEDDED_WORKERS": "2",
        "PYTHONPATH": str(REPO),
    }
    manage(env, "migrate", "-v0")
    manage(env, "create_tenant", "acme")
    manage(env, "create_project", "acme", "default")
    token = manage(env, "create_token", "acme", "--grants", "*", "--name", "t")
    port = free_port()
    server = _uvicorn(env, port, tmp_path / "server.log")
    base = f"http://127.0.0.1:{port}"
    try:
        assert _wait_for(lambda: _answers(base)), (tmp_path / "server.log").read_text()
        status, ready = _get(f"{base}/readyz")
        assert status == 200, ready
        assert ready["workers"] == {
            "can_claim": True,
            "source": "embedded",
            "alive": 2,
            "expected": 2,
        }
        status, run = _post(
            f"{base}/api/v1/runs/", token, {"project": "default", "workflow": "observed"}
        )
        assert status == 201
        finished = _wait_for(
            lambda: (
                (r := _get(f"{base}/api/v1/runs/{run['id']}/", token)[1])["status"]
                in ("succeeded", "failed")
                and r
            )
        )
        assert finished, "the run did not finish"
        assert finished["status"] == "succeeded", finished
    finally:
        server.terminate()
        server.wait(timeout=30)
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log, log


class _Forwarder:
    """A TCP port that forwards to PostgreSQL once :meth:`open` is called: "the database comes
    back" without touching the server under test."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self.listener: socket.socket | None = None

    def open(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()


@pytest.mark.django_db
def test_the_embedded_server_migrates_a_fresh_data_directory_itself(tmp_path):
    """No ``migrate`` first (as a plain script needs none): the server's start applies the
    migrations, so its workers never poll tables that do not exist."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
        "OPENRATH_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "OPENRATH_PROFILE": "embedded",
        "OPENRATH_EMBEDDED_WORKERS": "1",
        "PYTHONPATH": str(REPO),
    }
    port = free_port()
    server = _uvicorn(env, port, tmp_path / "server.log")
    base = f"http://127.0.0.1:{port}"
    try:
        assert _wait_for(lambda: _answers(base)), (tmp_path / "server.log").read_text()
        status, ready = _get(f"{base}/readyz")
        assert status == 200, ready
        pending = manage(env, "showmigrations", "--plan")
        assert "[X]" in pending
        assert "[ ]" not in pending, pending
        time.sleep(1.5)  # a few polls of the embedded worker: none may fail
    finally:
        server.terminate()
        server.wait(timeout=30)
    log = (tmp_path / "server.log").read_text()
    assert "no such table" not in log, log
    assert "Traceback" not in log, log


def test_production_web_waits_for_the_database_with_healthz_and_503s(tmp_path, settings):
    require_postgres()
    database = settings.DATABASES["default"]
    forwarder = _Forwarder((database["HOST"] or "127.0.0.1", int(database["PORT"] or 5432)))
    user = database["USER"] or "root"
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        **GOOD,
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "OPENRATH_PROFILE": "production",
        "OPENRATH_DATA_DIR": str(tmp_path),
        # The test database (migrated by the test run), through a port nothing listens on yet.
        "DATABASE_URL": f"postgres://{user}@127.0.0.1:{forwarder.port}/{database['NAME']}",
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "S3_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "ALLOWED_HOSTS": "127.0.0.1",
        "OPENRATH_LOG_FORMAT": "text",
    }
    port = free_port()
    log = tmp_path / "server.log"
    server = _uvicorn(env, port, log)
    base = f"http://127.0.0.1:{port}"
    try:
        assert _wait_for(lambda: _answers(base)), log.read_text()
        status, ready = _get(f"{base}/readyz")
        assert status == 503
        assert "migrations" in ready["failed"]
        assert ready["checks"]["migrations"]["error"].startswith(
            "RuntimeError: the database is unreachable ("
        )
        status, body = _get(f"{base}/api/v1/projects/")
        assert status == 503
        assert body["error"]["code"] == "database_unavailable"
        assert body["error"]["message"].startswith("not ready: the database is unreachable")

        forwarder.open()  # the database is back
        # A path outside the API and the console: served now, it writes no audit row into the
        # test database this server shares.
        opened = _wait_for(lambda: _get(f"{base}/no-such-page/")[0] != 503)
        assert opened, log.read_text()
        assert _get(f"{base}/no-such-page/")[0] == 404  # served by Django
        status, ready = _get(f"{base}/readyz")
        assert "migrations" not in ready["checks"]
        assert ready["checks"]["database"]["ok"] is True
    finally:
        server.terminate()
        server.wait(timeout=30)
        forwarder.close()
    text = log.read_text()
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if "the database is unreachable" in line]
    assert len(lines) == 1, text
    assert lines[0].startswith("the ASGI web process: the database is unreachable (")


def test_production_worker_exits_with_one_line_while_the_database_is_unreachable(tmp_path):
    env = {
        **GOOD,
        "OPENRATH_PROFILE": "production",
        "OPENRATH_DATA_DIR": str(tmp_path),
        "DATABASE_URL": f"postgres://openrath@127.0.0.1:{free_port()}/openrath",
    }
    result = run_manage("run_worker", env=env, timeout=120)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    unreachable = [line for line in lines if "the database is unreachable" in line]
    assert len(unreachable) == 1, result.stderr
    assert unreachable[0].startswith("Cannot start the worker: the database is unreachable (")
