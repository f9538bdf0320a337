"""Infrastructure outage drills against the whole production profile on this machine.

``deploy/bin/production-local`` starts the real processes (uvicorn, a Celery worker and beat,
optionally the database-claiming ``run_worker``, SeaweedFS) on a database and roles of their
own; each drill then takes a dependency away in the middle of a batch of runs and brings it
back: PostgreSQL (a private cluster: the machine's shared one is never restarted), Redis (a
private ``redis-server``), the S3 server, a worker killed again and again. Every drill asserts
exact counts (each run succeeded, every step once per checkpoint, every chunk once, every
artifact verified, every effect recorded once) and stops everything it started, also when it
fails. Results: ``docs/drills.md`` ("Infrastructure outages").
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from benchmarks._common import consecutive_free_ports, free_ports
from tests.drills import outage_workflows
from tests.drills.conftest import wait_for
from tests.s3 import require_weed
from tests.support import REPO, process_alive, service_missing

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

SCRIPT = REPO / "deploy" / "bin" / "production-local"
TERMINAL = {"succeeded", "failed", "cancelled", "timed_out", "needs_review"}
GRANTS = (
    "runs:read,runs:write,sessions:read,sessions:write,effects:read,interrupts:read,"
    "interrupts:resolve"
)
#: How long a drill waits for something that must happen (a process answering, runs finishing):
#: only a failing drill waits that long, so it is generous for a loaded machine.
WAIT = 180
#: What every drill's processes get on top of production-local's settings: short leases (a
#: killed worker's run is taken over in seconds), no write rate limit for the batch.
DRILL_ENV = {
    "OPENRATH_WORKFLOW_MODULES": outage_workflows.__name__,
    "OPENRATH_LEASE_SECONDS": "4",
    "OPENRATH_RATE_LIMIT_WRITES_PER_MINUTE": "100000",
    "OPENRATH_RATE_LIMIT_BURST": "10000",
    "OPENRATH_WS_RECHECK_SECONDS": "2",
    "LOG_LEVEL": "INFO",
}


def _shared_admin_url() -> str:
    from tests.settings import TEST_DATABASE_URL

    parts = urlsplit(TEST_DATABASE_URL)
    user = parts.username or "postgres"
    return f"postgres://{user}@{parts.hostname or '127.0.0.1'}:{parts.port or 5432}/postgres"


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# --- Private services ----------------------------------------------------------------------------


class PrivateRedis:
    """A ``redis-server`` of the drill's own on a free port (the shared one is never touched)."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            service_missing("needs redis-server (apt-get install redis-server)")
        self.binary = binary
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_ports(1)[0]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def ping(self) -> bool:
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def start(self) -> None:
        with open(self.workdir / "redis.log", "ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.workdir),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        wait_for(self.ping, timeout=WAIT, what="the private Redis to answer", every=0.05)

    def stop(self) -> None:
        """Stop it abruptly (an outage, not a maintenance window): its queue is lost."""
        if self.process is None:
            return
        _kill_group(self.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self.process = None


def _postgres_bindir() -> Path | None:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(re.findall(r"/postgresql/(\d+)/", p)[0]),
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PrivatePostgres:
    """A throw-away PostgreSQL cluster (initdb in a temporary directory, trust auth, a free
    port, sockets in its own directory) that a drill may stop and start at will."""

    def __init__(self) -> None:
        bindir = _postgres_bindir()
        if bindir is None:
            service_missing("needs the PostgreSQL server binaries (initdb, pg_ctl)")
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="openrath-pg-drill-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_ports(1)[0]
        self.as_postgres = os.geteuid() == 0  # initdb refuses to run as root
        if self.as_postgres:
            import pwd

            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                service_missing("running as root needs a 'postgres' user to run initdb as")
            os.chown(self.root, user.pw_uid, user.pw_gid)

    @property
    def admin_url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=self.root
        )

    def init(self) -> None:
        result = self._run(
            "initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
            "--no-locale", "--no-sync",
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        result = self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60",
            "start",
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr + self.log_tail()

    def stop(self, mode: str = "fast") -> None:
        result = self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        assert result.returncode == 0, result.stdout + result.stderr + self.log_tail()

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status").returncode == 0

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def destroy(self) -> None:
        if self.data.exists() and self.running():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


# --- The production profile ----------------------------------------------------------------------


class Profile:
    """One ``production-local`` instance: its env, its processes, its HTTP API and database."""

    def __init__(
        self, tmp: Path, *, admin_url: str, redis: PrivateRedis, extra: dict[str, str]
    ) -> None:
        suffix = secrets.token_hex(4)
        web, s3, master, volume, filer, metrics, run_metrics = free_ports(7)
        self.admin_url = admin_url
        self.redis = redis
        self.run_dir = tmp / "profile"
        self.base = f"http://127.0.0.1:{web}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OPENRATH_", "DJANGO_"))},
            "OPENRATH_LOCAL_DIR": str(self.run_dir),
            "OPENRATH_LOCAL_WEB_PORT": str(web),
            "OPENRATH_LOCAL_PG_ADMIN_URL": admin_url,
            "OPENRATH_LOCAL_DB": f"openrath_outage_{suffix}",
            "OPENRATH_LOCAL_OWNER_ROLE": f"openrath_outage_owner_{suffix}",
            "OPENRATH_LOCAL_RUNTIME_ROLE": f"openrath_outage_app_{suffix}",
            "OPENRATH_LOCAL_REDIS_PORT": str(redis.port),
            "OPENRATH_LOCAL_REDIS_DB": "0",
            "OPENRATH_LOCAL_S3_PORT": str(s3),
            "OPENRATH_LOCAL_WEED_MASTER_PORT": str(master),
            "OPENRATH_LOCAL_WEED_VOLUME_PORT": str(volume),
            "OPENRATH_LOCAL_WEED_FILER_PORT": str(filer),
            "OPENRATH_LOCAL_WEED_GRPC_BASE": str(consecutive_free_ports(4)),
            "OPENRATH_LOCAL_WORKER_METRICS_PORT": str(metrics),
            "OPENRATH_LOCAL_RUN_WORKER_METRICS_PORT": str(run_metrics),
            "OPENRATH_LOCAL_READY_TIMEOUT": "240",
            **DRILL_ENV,
            **extra,
        }
        for key in ("DATABASE_URL", "MIGRATION_DATABASE_URL", "REDIS_URL", "S3_BUCKET"):
            self.env.pop(key, None)
        self.database = self.env["OPENRATH_LOCAL_DB"]
        self.token = ""
        self.started = False

    # processes

    def _script(self, *args: str, timeout: float = 420) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
        )

    def start(self) -> None:
        self.started = True
        result = self._script("start")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
        for args in (("create_tenant", "drill"), ("create_project", "drill", "drill")):
            self.manage(*args)
        self.token = self.manage("create_token", "drill", "--grants", GRANTS)

    def stop(self) -> None:
        if self.started:
            self._script("stop", timeout=180)
            self.started = False

    def restart(self, name: str) -> None:
        result = self._script("restart", name)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]

    def pid(self, name: str) -> int:
        return int((self.run_dir / "pids" / f"{name}.pid").read_text())

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Signal the service's whole process group (a Celery worker and its pool)."""
        pid = self.pid(name)
        _kill_group(pid, sig)
        if sig == signal.SIGKILL:
            wait_for(
                lambda: not process_alive(pid), timeout=WAIT, what=f"{name} to die", every=0.05
            )
        return pid

    def log_tail(self, name: str, chars: int = 4000) -> str:
        try:
            return (self.run_dir / "logs" / f"{name}.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stacks(self, name: str) -> str:
        """What every thread of the service's main process is doing: a Celery worker logs them
        on SIGUSR1. For a drill's failure message (where a worker hangs, not just that)."""
        with contextlib.suppress(ProcessLookupError, OSError):
            os.kill(self.pid(name), signal.SIGUSR1)
            time.sleep(3)
        return self.log_tail(name, 12000)

    def manage(self, *args: str) -> str:
        env = dict(self.env)
        for line in (self.run_dir / "env").read_text().splitlines():
            if line.startswith("export "):
                key, _, value = line[len("export ") :].partition("=")
                env[key] = value.strip("'")
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout.strip().splitlines()[-1]

    # HTTP

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float = 30
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1 only
            self.base + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                raw, status = response.read(), response.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        except (OSError, urllib.error.URLError) as exc:
            return 0, str(exc)
        try:
            return status, json.loads(raw or b"null")
        except ValueError:
            return status, raw[:500]

    def readyz(self) -> tuple[int, Any]:
        return self.request("GET", "/readyz", timeout=20)

    def start_run(self, workflow: str, state: dict[str, Any]) -> dict[str, Any]:
        status, run = self.request(
            "POST", "/api/v1/runs/", {"workflow": workflow, "project": "drill", "state": state}
        )
        assert status == 201, (status, run)
        return run

    def run(self, run_id: str) -> dict[str, Any]:
        status, run = self.request("GET", f"/api/v1/runs/{run_id}/")
        assert status == 200, (status, run)
        return run

    def chunk_texts(self, session_id: str) -> list[str]:
        status, page = self.request("GET", f"/api/v1/sessions/{session_id}/chunks/?limit=200")
        assert status == 200, (status, page)
        assert page["next"] is None
        return [c["content"].get("text", "") for c in page["results"]]

    # database (as the admin: the test reads what the runtime wrote)

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        import psycopg

        url = self.admin_url.rsplit("/", 1)[0] + "/" + self.database
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as connection:
            return list(connection.execute(query, params).fetchall())

    def statuses(self, run_ids: list[str]) -> collections.Counter[str]:
        rows = self.sql("SELECT status FROM runs_app_run WHERE id = ANY(%s::uuid[])", run_ids)
        return collections.Counter(status for (status,) in rows)

    def wait_finished(self, run_ids: list[str], timeout: float) -> collections.Counter[str]:
        def finished() -> collections.Counter[str] | None:
            counts = self.statuses(run_ids)
            return counts if sum(counts[s] for s in TERMINAL) == len(run_ids) else None

        try:
            return wait_for(finished, timeout=timeout, what="every run to finish", every=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {dict(self.statuses(run_ids))}") from None

    def checkpoints(self, run_ids: list[str]) -> dict[str, list[str]]:
        rows = self.sql(
            "SELECT run_id::text, step FROM runs_app_checkpoint WHERE run_id = ANY(%s::uuid[]) "
            "ORDER BY run_id, seq",
            run_ids,
        )
        steps: dict[str, list[str]] = {run_id: [] for run_id in run_ids}
        for run_id, step in rows:
            steps[run_id].append(step)
        return steps

    def event_counts(self, run_ids: list[str]) -> collections.Counter[str]:
        rows = self.sql(
            "SELECT type, count(*) FROM runs_app_runevent WHERE run_id = ANY(%s::uuid[]) "
            "GROUP BY type",
            run_ids,
        )
        return collections.Counter(dict(rows))

    def drop(self) -> None:
        """The instance's database and roles (production-local leaves them in place)."""
        import psycopg

        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as admin,
        ):
            admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            for role in ("OPENRATH_LOCAL_RUNTIME_ROLE", "OPENRATH_LOCAL_OWNER_ROLE"):
                admin.execute(f'DROP ROLE IF EXISTS "{self.env[role]}"')


@pytest.fixture
def private_redis(tmp_path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    cluster = PrivatePostgres()
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def profile_factory(tmp_path, private_redis) -> Iterator[Callable[..., Profile]]:
    """Make (and afterwards stop, drop and report) a production-local instance."""
    require_weed()
    made: list[Profile] = []

    def make(admin_url: str | None = None, **extra: str) -> Profile:
        url = admin_url or _shared_admin_url()
        try:
            import psycopg

            psycopg.connect(url, connect_timeout=3).close()
        except Exception as exc:
            service_missing(f"needs PostgreSQL with a superuser at {url}: {exc}")
        profile = Profile(tmp_path, admin_url=url, redis=private_redis, extra=extra)
        made.append(profile)
        profile.start()
        return profile

    try:
        yield make
    finally:
        for profile in made:
            pids = {p.stem: int(p.read_text()) for p in (profile.run_dir / "pids").glob("*.pid")}
            profile.stop()
            for name, pid in pids.items():  # a restart's leftovers, whatever happened
                if process_alive(pid):
                    print(f"{name} (pid {pid}) survived stop; killing it")
                    _kill_group(pid)
            profile.drop()
            for name in ("web", "worker", "beat", "run_worker"):
                tail = profile.log_tail(name, 3000)
                if tail:
                    print(f"--- {name}.log ---\n{tail}")


# --- WebSocket subscribers -----------------------------------------------------------------------


class Stream:
    """What one subscriber of ``ws/<kind>/<id>/`` received, across its reconnects."""

    def __init__(self, kind: str, object_id: str) -> None:
        self.kind = kind
        self.object_id = object_id
        self.items: list[tuple[int, Any]] = []  # (seq, chunk text or event type), in order
        self.status = ""  # runs: the last status the stream reported
        self.connects = 0  # streams that went live (``ready``)
        self.failures = 0  # handshakes refused, sockets closed or reset
        self.ready = threading.Event()

    @property
    def last(self) -> int:
        if self.items:
            return self.items[-1][0]
        return -1 if self.kind == "sessions" else 0

    def seqs(self) -> list[int]:
        return [seq for seq, _ in self.items]


class Subscribers:
    """Live subscribers in a background event loop. Each reconnects (``after=`` the last seq it
    saw) whenever its socket fails or closes, as a client should, until ``stop()``."""

    def __init__(self, base: str, token: str) -> None:
        self.url = base.replace("http://", "ws://")
        self.token = token
        self.streams: list[Stream] = []
        self.loop = asyncio.new_event_loop()
        self.stopping: asyncio.Event | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.tasks: list[concurrent.futures.Future[None]] = []

    def subscribe(self, kind: str, object_id: str) -> Stream:
        stream = Stream(kind, object_id)
        self.streams.append(stream)
        self.tasks.append(asyncio.run_coroutine_threadsafe(self._follow(stream), self.loop))
        return stream

    async def _follow(self, stream: Stream) -> None:
        from websockets.asyncio.client import connect

        backoff = 0.2
        while not self._stopped():
            url = f"{self.url}/ws/{stream.kind}/{stream.object_id}/?after={stream.last}"
            try:
                async with connect(
                    url,
                    additional_headers={"Authorization": f"Bearer {self.token}"},
                    open_timeout=5,
                    max_queue=None,
                ) as socket_:
                    while not self._stopped():
                        try:
                            raw = await asyncio.wait_for(socket_.recv(), timeout=0.5)
                        except TimeoutError:
                            continue
                        frame = json.loads(raw)
                        if frame["type"] == "ready":
                            stream.connects += 1
                            backoff = 0.2
                        self._take(stream, frame)
            except Exception:  # refused, reset, closed by the server: reconnect
                stream.failures += 1
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    @staticmethod
    def _take(stream: Stream, frame: dict[str, Any]) -> None:
        if frame["type"] == "ready":
            stream.ready.set()
        elif frame["type"] == "chunk":
            chunk = frame["chunk"]
            stream.items.append((chunk["seq"], chunk["content"].get("text", "")))
        elif frame["type"] == "event":
            stream.items.append((frame["event"]["seq"], frame["event"]["type"]))
        elif frame["type"] == "run":
            stream.status = frame["run"]["status"]

    def _stopped(self) -> bool:
        return getattr(self, "_stop_flag", False)

    def stop(self) -> None:
        self._stop_flag = True
        for task in self.tasks:
            with contextlib.suppress(Exception):
                task.result(timeout=15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def subscribers_factory() -> Iterator[Callable[[Profile], Subscribers]]:
    made: list[Subscribers] = []

    def make(profile: Profile) -> Subscribers:
        subscribers = Subscribers(profile.base, profile.token)
        made.append(subscribers)
        return subscribers

    try:
        yield make
    finally:
        for subscribers in made:
            subscribers.stop()


def _marks(log: Path) -> collections.Counter[str]:
    """``start:<run>:<step>`` / ``end:<run>:<step>`` lines of the drill workflows, counted."""
    if not log.exists():
        return collections.Counter()
    return collections.Counter(line.split()[0] for line in log.read_text().splitlines())


def _claims(profile: Profile, run_ids: list[str]) -> dict[str, list[str]]:
    rows = profile.sql(
        "SELECT run_id::text, data->>'worker' FROM runs_app_runevent "
        "WHERE run_id = ANY(%s::uuid[]) AND type = 'run.claimed' ORDER BY run_id, seq",
        run_ids,
    )
    claims: dict[str, list[str]] = {run_id: [] for run_id in run_ids}
    for run_id, worker in rows:
        claims[run_id].append(worker)
    return claims


STEPS = ["s1", "s2", "s3", "s4", "s5"]
STEP_TEXTS = [f"{step} done" for step in STEPS]


def _assert_steps_once(profile: Profile, run_ids: list[str], log: Path) -> dict[str, int]:
    """Every run: one checkpoint per step, in order; its session view holds each step's chunk
    once; every step finished at least once. Returns how many step executions were repeated."""
    checkpoints = profile.checkpoints(run_ids)
    assert {run_id: steps for run_id, steps in checkpoints.items() if steps != STEPS} == {}
    marks = _marks(log)
    repeated = {"started": 0, "finished": 0}
    for run_id in run_ids:
        run = profile.run(run_id)
        assert run["output"]["done"] == STEPS, run
        assert profile.chunk_texts(run["session"]) == STEP_TEXTS, run_id
        for step in STEPS:
            assert marks[f"end:{run_id}:{step}"] >= 1, (run_id, step)
            repeated["started"] += marks[f"start:{run_id}:{step}"] - 1
            repeated["finished"] += marks[f"end:{run_id}:{step}"] - 1
    return repeated


def _assert_streams_exact(profile: Profile, subscribers: Subscribers) -> dict[str, int]:
    """Every subscriber saw its stream exactly once, in order, up to the end."""
    reconnects = failed = 0
    for stream in subscribers.streams:
        reconnects += stream.connects - 1
        failed += stream.failures
        if stream.kind == "runs":
            run = profile.run(stream.object_id)
            assert stream.seqs() == list(range(1, run["events"] + 1)), stream.object_id
            assert stream.status == run["status"] == "succeeded"
        else:
            texts = profile.chunk_texts(stream.object_id)
            assert stream.seqs() == list(range(len(texts))), stream.object_id
            assert [text for _, text in stream.items] == texts
    return {"streams": len(subscribers.streams), "resumed": reconnects, "dropped": failed}


def _wait_caught_up(profile: Profile, subscribers: Subscribers, timeout: float) -> None:
    def expected(stream: Stream) -> int:
        if stream.kind == "runs":
            return int(profile.run(stream.object_id)["events"])
        return len(profile.chunk_texts(stream.object_id)) - 1

    def caught_up() -> bool:
        return all(stream.last >= expected(stream) for stream in subscribers.streams)

    wait_for(caught_up, timeout=timeout, what="the subscribers to catch up", every=0.5)


def _report(name: str, started: float, **figures: Any) -> None:
    """One line the drills table in docs/drills.md is written from (``pytest -s`` shows it)."""
    print(f"DRILL {name}: {time.monotonic() - started:.1f} s; {json.dumps(figures)}")


# --- The drills ----------------------------------------------------------------------------------


def test_redis_stopped_runs_finish_through_the_database_worker(
    profile_factory, private_redis, subscribers_factory, tmp_path
):
    """Redis (broker and channel layer) dies mid-batch: the database-claiming worker finishes
    the runs, runs can still be created, streams recover, nothing is lost or repeated."""
    started = time.monotonic()
    profile = profile_factory(OPENRATH_LOCAL_RUN_WORKER="1")
    log = tmp_path / "steps.log"
    state = {"log": str(log), "step_seconds": 0.4}
    runs = [profile.start_run("outage_steps", state) for _ in range(12)]
    subscribers = subscribers_factory(profile)
    for run in runs[:3]:
        subscribers.subscribe("runs", run["id"])
        subscribers.subscribe("sessions", run["session"])
    for stream in subscribers.streams:
        assert stream.ready.wait(WAIT), stream.object_id
    run_ids = [run["id"] for run in runs]
    wait_for(
        lambda: profile.statuses(run_ids)["succeeded"] >= 2, timeout=WAIT, what="2 runs to succeed"
    )

    outage_began = time.monotonic()
    private_redis.stop()
    try:
        status, ready = wait_for(
            lambda: (r := profile.readyz())[0] == 503 and r,
            timeout=WAIT,
            what="/readyz to answer 503",
        )
        assert ready["failed"] == ["redis"], ready
        # Runs can still be created (the broker hint is dropped; the database is the queue).
        for _ in range(4):
            posted = time.monotonic()
            runs.append(profile.start_run("outage_steps", state))
            # Not held up by the broker (its hint is dropped after a 2 s connect timeout); the
            # bound leaves a loaded machine a margin and still tells that from a hang.
            assert time.monotonic() - posted < 20
        run_ids = [run["id"] for run in runs]
        succeeded_at_outage = profile.statuses(run_ids)["succeeded"]
        wait_for(
            lambda: (
                profile.statuses(run_ids)["succeeded"] >= succeeded_at_outage + 4
                and time.monotonic() - outage_began > 10
            ),
            timeout=2 * WAIT,
            what="4 more runs to succeed while Redis is down",
        )
        during = profile.statuses(run_ids)["succeeded"] - succeeded_at_outage
    finally:
        private_redis.start()
    outage_seconds = time.monotonic() - outage_began
    wait_for(lambda: profile.readyz()[0] == 200, timeout=WAIT, what="/readyz to answer 200")
    # The Celery worker reconnects on its own, and runs go through the broker again.
    try:
        wait_for(
            lambda: profile.log_tail("worker", 10**7).count("Connected to redis://") >= 2,
            timeout=WAIT,
            what="the Celery worker to reconnect to Redis",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the worker's threads:\n{profile.stacks('worker')}") from None
    after = [profile.start_run("outage_steps", state) for _ in range(6)]
    runs += after
    run_ids = [run["id"] for run in runs]

    assert profile.wait_finished(run_ids, timeout=2 * WAIT) == {"succeeded": len(run_ids)}
    repeated = _assert_steps_once(profile, run_ids, log)
    claims = _claims(profile, run_ids)
    by_db_worker = [
        r for r, workers in claims.items() if workers[-1].startswith("production-local-db")
    ]
    assert len(by_db_worker) >= during > 0
    after_ids = [run["id"] for run in after]
    assert any(w.startswith("celery:") for r in after_ids for w in claims[r]), claims
    _wait_caught_up(profile, subscribers, timeout=WAIT)
    streams = _assert_streams_exact(profile, subscribers)
    assert process_alive(profile.pid("worker")), "the Celery worker did not survive the outage"
    assert process_alive(profile.pid("beat"))
    _report(
        "redis",
        started,
        runs=len(run_ids),
        succeeded_during_outage=during,
        finished_by_db_worker=len(by_db_worker),
        outage_seconds=round(outage_seconds, 1),
        repeated=repeated,
        **streams,
    )


def test_postgres_restarted_runs_resume_and_all_succeed(
    private_postgres, profile_factory, tmp_path
):
    """The database (a private cluster) goes away under a batch of runs, twice: a quick
    restart, then an outage of several seconds. Requests during the outage get 503s, /readyz
    names the database; every run resumes and succeeds with each step checkpointed once."""
    started = time.monotonic()
    profile = profile_factory(admin_url=private_postgres.admin_url)
    log = tmp_path / "steps.log"
    state = {"log": str(log), "step_seconds": 0.3}
    runs = [profile.start_run("outage_steps", state) for _ in range(24)]
    run_ids = [run["id"] for run in runs]
    wait_for(
        lambda: profile.statuses(run_ids)["succeeded"] >= 2, timeout=WAIT, what="2 runs to succeed"
    )

    # A quick restart: the connections every process holds are gone, the server is back.
    private_postgres.stop("fast")
    private_postgres.start()
    after_restart = [profile.request("GET", f"/api/v1/runs/{run_ids[0]}/")[0] for _ in range(20)]
    assert after_restart == [200] * 20, after_restart
    wait_for(
        lambda: profile.statuses(run_ids)["succeeded"] >= 5, timeout=WAIT, what="5 runs to succeed"
    )
    before = profile.statuses(run_ids)

    # An outage: requests wait for a connection (DATABASE_POOL_TIMEOUT), then answer 503.
    private_postgres.stop("fast")
    outage_began = time.monotonic()
    try:
        status, ready = profile.readyz()
        readyz_seconds = time.monotonic() - outage_began
        assert (status, ready["failed"]) == (503, ["database"]), ready
        # A bounded pool wait (2 s), inside the probe's timeout (8 s in deploy/k8s).
        assert readyz_seconds < 8, readyz_seconds
        posted = time.monotonic()
        status, refused = profile.request(
            "POST",
            "/api/v1/runs/",
            {"workflow": "outage_steps", "project": "drill", "state": state},
        )
        post_seconds = time.monotonic() - posted
        assert (status, refused["error"]["code"]) == (503, "database_unavailable"), refused
        # One pool wait (DATABASE_POOL_TIMEOUT, 10 s): the audit row is not awaited (two would
        # take 20 s); the rest is a margin for a loaded machine.
        assert post_seconds < 19, post_seconds
        while time.monotonic() - outage_began < 8:
            time.sleep(0.2)
    finally:
        private_postgres.start()
        back_at = time.time()
    outage_seconds = time.monotonic() - outage_began
    wait_for(lambda: profile.readyz()[0] == 200, timeout=WAIT, what="/readyz to answer 200")
    ready_after = time.time() - back_at

    assert profile.wait_finished(run_ids, timeout=2 * WAIT) == {"succeeded": len(run_ids)}
    (last_finished,) = profile.sql("SELECT extract(epoch FROM max(finished_at)) FROM runs_app_run")[
        0
    ]
    recovered = float(last_finished) - back_at
    (created,) = profile.sql("SELECT count(*) FROM runs_app_run")[0]
    assert created == len(run_ids)  # the refused request created nothing
    repeated = _assert_steps_once(profile, run_ids, log)
    events = profile.event_counts(run_ids)
    assert all(process_alive(profile.pid(name)) for name in ("web", "worker", "beat"))
    _report(
        "postgres",
        started,
        runs=len(run_ids),
        succeeded_before_outage=before["succeeded"],
        outage_seconds=round(outage_seconds, 1),
        readyz_503_after_s=round(readyz_seconds, 1),
        post_503_after_s=round(post_seconds, 1),
        ready_200_after_restart_s=round(ready_after, 1),
        all_succeeded_after_restart_s=round(recovered, 1),
        lease_expired=events["lease.expired"],
        repeated=repeated,
    )


def _canonical(value: Any) -> bytes:
    """How ``openrath_project.large_values`` encodes a value before storing it."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False).encode()


def _bucket_objects(profile: Profile) -> dict[str, bytes]:
    """Every artifact object in the instance's bucket, read directly from SeaweedFS."""
    import boto3
    from botocore.config import Config

    env = dict(
        line.split("=", 1)
        for line in (profile.run_dir / "secrets.env").read_text().splitlines()
        if "=" in line
    )
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{profile.env['OPENRATH_LOCAL_S3_PORT']}",
        aws_access_key_id=env["S3_ACCESS_KEY_ID"],
        aws_secret_access_key=env["S3_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"),
    )
    bucket = profile.env.get("OPENRATH_LOCAL_S3_BUCKET", "openrath")
    objects: dict[str, bytes] = {}
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="artifacts/"
    ):
        for item in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            objects[item["Key"]] = body
    return objects


def test_s3_server_stopped_mid_batch_steps_wait_and_every_artifact_verifies(
    profile_factory, tmp_path
):
    """SeaweedFS is killed while runs store and read large state values: those steps fail
    with ``storage_unavailable`` and are retried on their timer, /readyz names storage, and
    after the restart every run succeeds and every stored object matches its digest."""
    started = time.monotonic()
    profile = profile_factory(OPENRATH_STATE_INLINE_BYTES="1024")
    log = tmp_path / "steps.log"
    seeds = [f"doc-{n}" for n in range(20)]
    runs = [
        profile.start_run(
            "outage_artifacts", {"log": str(log), "seed": seed, "size": 4096, "step_seconds": 0.3}
        )
        for seed in seeds
    ]
    run_ids = [run["id"] for run in runs]
    wait_for(
        lambda: profile.statuses(run_ids)["succeeded"] >= 3, timeout=WAIT, what="3 runs to succeed"
    )
    before = profile.statuses(run_ids)

    def storage_retries() -> int:
        (count,) = profile.sql(
            "SELECT count(*) FROM runs_app_runevent WHERE run_id = ANY(%s::uuid[]) "
            "AND type = 'step.retry_scheduled' AND data->>'code' = 'storage_unavailable'",
            run_ids,
        )[0]
        return int(count)

    profile.kill("weed")
    outage_began = time.monotonic()
    try:
        status, ready = wait_for(
            lambda: (r := profile.readyz())[0] == 503 and r,
            timeout=WAIT,
            what="/readyz to answer 503",
        )
        assert ready["failed"] == ["storage"], ready
        wait_for(
            lambda: storage_retries() >= 3 and time.monotonic() - outage_began > 8,
            timeout=WAIT,
            what="steps to fail with storage_unavailable and be retried",
        )
        during = profile.statuses(run_ids)
        assert during["failed"] == 0, during
    finally:
        profile.restart("weed")
    outage_seconds = time.monotonic() - outage_began
    wait_for(lambda: profile.readyz()[0] == 200, timeout=WAIT, what="/readyz to answer 200")

    assert profile.wait_finished(run_ids, timeout=2 * WAIT) == {"succeeded": len(run_ids)}
    recovered = time.monotonic() - outage_began - outage_seconds
    checkpoints = profile.checkpoints(run_ids)
    assert {
        r: steps for r, steps in checkpoints.items() if steps != ["write", "derive", "check"]
    } == {}
    for run_id, seed in zip(run_ids, seeds, strict=True):
        run = profile.run(run_id)
        assert run["output"]["checked"] is True
        assert profile.chunk_texts(run["session"]) == [
            "wrote the document",
            "derived the summary",
            "checked both",
        ]
        doc = outage_workflows.document(seed, 4096)
        for key, expected in (("doc", doc), ("summary", outage_workflows.summary_of(doc))):
            ref = run["output"][key]["$artifact"]
            assert ref["digest"] == hashlib.sha256(_canonical(expected)).hexdigest()
            status, value = profile.request(
                "GET", f"/api/v1/runs/{run_id}/artifacts/{ref['digest']}/"
            )
            assert (status, value) == (200, expected)
    objects = _bucket_objects(profile)
    corrupted = [
        key
        for key, body in objects.items()
        if hashlib.sha256(body).hexdigest() != key.rsplit("/", 1)[1]
    ]
    assert corrupted == []
    assert len(objects) == 2 * len(run_ids)  # a document and a summary per run, stored once
    retries = storage_retries()
    _report(
        "s3",
        started,
        runs=len(run_ids),
        succeeded_before_outage=before["succeeded"],
        outage_seconds=round(outage_seconds, 1),
        all_succeeded_after_restart_s=round(recovered, 1),
        storage_retries=retries,
        objects_verified=len(objects),
    )


def test_worker_killed_repeatedly_every_effect_recorded_once(profile_factory, tmp_path):
    """``kill -9`` the Celery worker (main process and pool) five times during a batch of 200
    runs, restarting it each time: every run succeeds and every run's idempotent effect is in
    the ledger once and applied by the "external system" once (a call cut short is retried
    with the same idempotency key)."""
    started = time.monotonic()
    profile = profile_factory()
    ledger = tmp_path / "ledger"
    (ledger / "applied").mkdir(parents=True)
    texts = [f"note-{n}" for n in range(200)]

    def start(text: str) -> dict[str, Any]:
        state = {"ledger": str(ledger), "text": text, "effect_seconds": 0.1}
        return profile.start_run("outage_effect", state)

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        runs = list(pool.map(start, texts))
    run_ids = [run["id"] for run in runs]
    wait_for(
        lambda: profile.statuses(run_ids)["succeeded"] >= 5, timeout=WAIT, what="5 runs to succeed"
    )

    kills = []
    for _ in range(5):
        time.sleep(2.5)
        running = profile.statuses(run_ids)["running"]
        profile.kill("worker")
        kills.append(running)
        profile.restart("worker")
    killing_done = time.monotonic()
    succeeded_at_last_kill = profile.statuses(run_ids)["succeeded"]
    assert succeeded_at_last_kill < len(run_ids), "the batch ended before the kills did"

    assert profile.wait_finished(run_ids, timeout=2 * WAIT) == {"succeeded": len(run_ids)}
    tail = time.monotonic() - killing_done

    effects = profile.sql(
        "SELECT run_id::text, key, status, attempts, idempotency_key FROM effects_app_effectrecord "
        "WHERE run_id = ANY(%s::uuid[])",
        run_ids,
    )
    assert len(effects) == len(run_ids)
    assert {row[0] for row in effects} == set(run_ids)
    assert {(key, status) for _, key, status, _, _ in effects} == {("publish", "succeeded")}
    attempts = {row[4]: row[3] for row in effects}
    applied = sorted(path.name for path in (ledger / "applied").iterdir())
    assert applied == sorted(attempts)  # applied once per run, by its idempotency key
    calls = collections.Counter(
        line.split()[0].removeprefix("call:")
        for line in (ledger / "calls.log").read_text().splitlines()
    )
    assert set(calls) == set(attempts)
    assert {key: n for key, n in calls.items() if n > attempts[key]} == {}
    repeated_calls = sum(n - 1 for n in calls.values())

    checkpoints = profile.checkpoints(run_ids)
    expected = ["prepare", "publish", "confirm"]
    assert {r: steps for r, steps in checkpoints.items() if steps != expected} == {}
    for run, text in zip(runs[::20], texts[::20], strict=True):  # a sample: 10 sessions
        done = profile.run(run["id"])
        receipt = done["output"]["receipt"]["receipt"]
        assert profile.chunk_texts(done["session"]) == [
            f"prepared {text}",
            f"published {text}",
            f"confirmed {receipt}",
        ]
    events = profile.event_counts(run_ids)
    assert events["lease.expired"] >= 1
    _report(
        "kill-9",
        started,
        runs=len(run_ids),
        kills=len(kills),
        running_at_kills=kills,
        succeeded_at_last_kill=succeeded_at_last_kill,
        tail_after_last_kill_s=round(tail, 1),
        lease_expired=events["lease.expired"],
        effects_called_again=repeated_calls,
        effects_applied=len(applied),
    )
