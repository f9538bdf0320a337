"""A real tracing backend for tests: Arize Phoenix, run locally on 127.0.0.1.

Phoenix pins other OpenTelemetry releases than the product, so it lives in a virtualenv of its
own, ``.venv/phoenix`` (``.ci/run`` creates it: ``python3 -m venv .venv/phoenix`` and
``.venv/phoenix/bin/pip install arize-phoenix``; ``OPENRATH_PHOENIX`` names another ``phoenix``
executable). ``start_phoenix(tmp_dir)`` starts ``phoenix serve`` on free ports with its data
under ``tmp_dir`` (SQLite), no telemetry and no external resources, and returns once it answers;
``PhoenixServer.stop()`` kills it. It receives OTLP over HTTP at ``/v1/traces`` and answers span
queries on its REST API (``/v1/projects/{project}/spans``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import free_ports
from tests.support import REPO, service_missing


def phoenix_binary() -> str | None:
    explicit = os.environ.get("OPENRATH_PHOENIX", "")
    candidates = [explicit] if explicit else []
    candidates.append(str(REPO / ".venv" / "phoenix" / "bin" / "phoenix"))
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def require_phoenix() -> str:
    binary = phoenix_binary()
    if binary is None:
        service_missing(
            "needs Arize Phoenix: `python3 -m venv .venv/phoenix && "
            ".venv/phoenix/bin/pip install arize-phoenix` (what .ci/run does)"
        )
    return binary


@dataclass
class PhoenixServer:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def otlp_endpoint(self) -> str:
        """``OTEL_EXPORTER_OTLP_ENDPOINT`` for a process that exports here."""
        return self.base_url

    def running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.base_url}{path}", timeout=30) as response:  # noqa: S310
            return json.loads(response.read())

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span Phoenix holds for ``project`` (the resource's
        ``openinference.project.name``); ``[]`` before the first arrives."""
        found: list[dict[str, Any]] = []
        cursor = ""
        while True:
            query = f"?limit=1000{'&cursor=' + cursor if cursor else ''}"
            try:
                page = self._get(f"/v1/projects/{project}/spans{query}")
            except urllib.error.HTTPError as exc:
                if exc.code == 404:  # no span for the project yet
                    return []
                raise
            found.extend(page["data"])
            cursor = page.get("next_cursor") or ""
            if not cursor:
                return found

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


def start_phoenix(tmp_dir: Path, *, timeout: float = 180.0) -> PhoenixServer:
    binary = require_phoenix()
    http_port, grpc_port = free_ports(2)
    work = tmp_dir / "phoenix"
    work.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(http_port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    }
    log_path = tmp_dir / "phoenix.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [binary, "serve"],
            env=env,
            cwd=work,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = PhoenixServer(f"http://127.0.0.1:{http_port}", process, log_path)
    deadline = time.monotonic() + timeout
    while True:
        if not server.running():
            raise RuntimeError(f"phoenix exited with {process.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.base_url}/healthz", timeout=5) as response:  # noqa: S310
                if response.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"phoenix did not answer in {timeout:.0f}s:\n{server.log_tail()}")
        time.sleep(0.3)
