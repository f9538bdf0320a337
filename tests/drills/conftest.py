"""Drill fixtures: worker processes (database-claiming and Celery) on the test database.

Every process is bounded in time and killed at teardown; everything targets 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.support import REPO, require_postgres, require_redis

DRILL_ENV = {
    "OPENRATH_WORKFLOW_MODULES": "tests.drills.workflows",
    "OPENRATH_LEASE_SECONDS": "3",
    "OPENRATH_HARD_TIMEOUT_GRACE": "2",
    "OPENRATH_PROFILE": "embedded",
    "OPENRATH_DISPATCH": "none",
    "LOG_LEVEL": "INFO",
}


class Processes:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.started: list[subprocess.Popen[bytes]] = []

    def env(self, **extra: str) -> dict[str, str]:
        settings = connection.settings_dict
        url = (
            f"postgres://{settings['USER']}@{settings['HOST'] or '127.0.0.1'}:"
            f"{settings['PORT'] or 5432}/{settings['NAME']}"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENRATH_")}
        env.update(DRILL_ENV)
        env.update(
            {
                "DATABASE_URL": url,
                "OPENRATH_DATA_DIR": str(self.tmp / "data"),
                "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
                "PYTHONPATH": str(REPO),
            }
        )
        env.update(extra)
        return env

    def start(self, args: list[str], *, name: str, **env: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            args,
            cwd=REPO,
            env=self.env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        process.log_path = self.tmp / f"{name}.log"  # type: ignore[attr-defined]
        self.started.append(process)
        return process

    def db_worker(self, name: str, **env: str) -> subprocess.Popen[bytes]:
        return self.start(
            [sys.executable, "manage.py", "run_worker", "--poll", "0.2", "--name", name],
            name=name,
            **env,
        )

    def celery_worker(
        self, name: str, redis_url: str, *, beat: bool = False, concurrency: int = 1
    ) -> subprocess.Popen[bytes]:
        args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "openrath_project",
            "worker",
            "--pool",
            "prefork",
            "--concurrency",
            str(concurrency),
            "--loglevel",
            "INFO",
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        if beat:
            args += ["-B", "--schedule", str(self.tmp / f"{name}-beat")]
        return self.start(args, name=name, REDIS_URL=redis_url, OPENRATH_DISPATCH="celery")

    @staticmethod
    def kill(process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)

    def stop_all(self) -> None:
        for process in self.started:
            self.kill(process, signal.SIGCONT)
            self.kill(process, signal.SIGKILL)
        for process in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


@pytest.fixture
def processes(transactional_db, tmp_path) -> Iterator[Processes]:
    require_postgres()
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()
        for process in procs.started:
            log = getattr(process, "log_path", None)
            if log and log.exists():
                print(f"--- {log.name} ---\n{log.read_text()[-4000:]}")


@pytest.fixture
def redis_url() -> str:
    require_redis()
    return "redis://127.0.0.1:6379/14"


def wait_for(
    predicate: Callable[[], object], *, timeout: float, what: str, every: float = 0.1
) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def lines(log: Path) -> list[str]:
    return log.read_text().split("\n")[:-1] if log.exists() else []


def events_of(log: Path, prefix: str) -> list[str]:
    return [line for line in lines(log) if line.startswith(prefix)]
