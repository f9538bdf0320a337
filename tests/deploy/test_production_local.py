"""``deploy/bin/production-local``: the whole production profile on this machine, end to end.

Starts PostgreSQL roles and a database, Redis, SeaweedFS, migrations as the owner, uvicorn,
a Celery worker and beat; a run submitted over HTTP completes through the Celery worker; no
process it starts holds a secret in its environment; `stop` leaves no process behind.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks._common import consecutive_free_ports, free_ports
from openrath_project.secretfiles import SECRET_SETTINGS
from tests.s3 import require_weed
from tests.support import REPO, process_alive, require_redis, run_manage, service_missing

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

SCRIPT = REPO / "deploy" / "bin" / "production-local"
#: A Redis database of its own (others' tests use 13-15): two runs of this test at once on one
#: machine would otherwise consume each other's Celery messages.
REDIS_DBS = tuple(str(n) for n in range(3, 13))
#: A model provider key in the caller's environment: it must reach the processes as a file only.
CALLER_OPENAI_KEY = "sk-production-local-" + secrets.token_hex(16)
#: uvicorn worker processes: two, as the default gives on a two-core machine.
WEB_WORKERS = 2


def _redis_db() -> str:
    """The database of an explicit ``OPENRATH_TEST_REDIS_URL`` (the fixture empties it at the
    end: it must be this test run's own), else one of ``REDIS_DBS``."""
    explicit = os.environ.get("OPENRATH_TEST_REDIS_URL", "")
    path = urlsplit(explicit).path.strip("/")
    return path if path.isdigit() else secrets.choice(REDIS_DBS)


def _admin_url() -> str:
    from tests.settings import TEST_DATABASE_URL

    parts = urlsplit(TEST_DATABASE_URL)
    user = parts.username or "postgres"
    return f"postgres://{user}@{parts.hostname or '127.0.0.1'}:{parts.port or 5432}/postgres"


def _admin_connection() -> Any:
    import psycopg

    try:
        return psycopg.connect(_admin_url(), autocommit=True, connect_timeout=3)
    except Exception as exc:
        service_missing(f"needs PostgreSQL with a superuser at {_admin_url()}: {exc}")


def _request(url: str, *, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers)  # noqa: S310 - 127.0.0.1
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    text = raw.decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def _read_env_file(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            env[key] = value.strip("'")
    return env


def _session_members(leader: int) -> list[int]:
    """Every live process in the session ``leader`` leads (``spawn`` puts each service in its
    own): the server itself and its children (uvicorn's and Celery's worker processes)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[3]) == leader and fields[0] not in (b"Z", b"X"):  # field 6: session id
            members.append(int(entry.name))
    return sorted(members)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {key: value for key, _, value in pairs}


def _assert_no_secret_in_environments(run_dir: Path, pids: dict[str, int]) -> None:
    """The values of the instance's secrets appear in no started process's environment; the
    runtime processes name the files instead, and none of them names the owner role's."""
    secrets_dir = run_dir / "secrets"
    assert secrets_dir.stat().st_mode & 0o777 == 0o700
    files = {path.name: path for path in secrets_dir.iterdir()}
    assert set(files) == set(SECRET_SETTINGS)
    for path in files.values():
        assert path.stat().st_mode & 0o777 == 0o600, path
    values = {name: path.read_text().rstrip("\n") for name, path in files.items()}
    assert values["OPENAI_API_KEY"] == CALLER_OPENAI_KEY
    generated = dict(
        line.split("=", 1) for line in (run_dir / "secrets.env").read_text().splitlines()
    )
    needles = {value for value in (*values.values(), *generated.values()) if len(value) >= 8}
    assert len(needles) >= 8
    checked = 0
    for name in ("web", "worker", "beat", "weed"):
        members = _session_members(pids[name])
        assert pids[name] in members, name
        if name == "worker":
            assert len(members) >= 2, members  # Celery's main process and its pool's children
        for pid in members:
            environment = _environ(pid)
            raw = "\0".join(f"{k}={v}" for k, v in environment.items())
            assert [n for n in needles if n in raw] == [], (name, pid)
            assert [k for k in SECRET_SETTINGS if k in environment] == [], (name, pid)
            assert "MIGRATION_DATABASE_URL_FILE" not in environment, (name, pid)
            if name != "weed":
                expected = {f"{k}_FILE": str(files[k]) for k in SECRET_SETTINGS}
                del expected["MIGRATION_DATABASE_URL_FILE"]
                named = {k: environment[k] for k in expected.keys() & environment.keys()}
                assert named == expected, (name, pid)
            checked += 1
    assert checked >= 5  # web, the worker and a pool process (or more), beat, weed


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def local_instance(tmp_path):
    require_redis()
    require_weed()
    admin = _admin_connection()
    suffix = secrets.token_hex(4)
    redis_db = _redis_db()
    web_port, s3_port, master, volume, filer, worker_metrics = free_ports(6)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OPENRATH_", "DJANGO_"))},
        "OPENRATH_LOCAL_DIR": str(tmp_path / "run"),
        "OPENRATH_LOCAL_WEB_PORT": str(web_port),
        "OPENRATH_LOCAL_PG_ADMIN_URL": _admin_url(),
        "OPENRATH_LOCAL_DB": f"openrath_pl_{suffix}",
        "OPENRATH_LOCAL_OWNER_ROLE": f"openrath_pl_owner_{suffix}",
        "OPENRATH_LOCAL_RUNTIME_ROLE": f"openrath_pl_app_{suffix}",
        "OPENRATH_LOCAL_REDIS_DB": redis_db,
        "OPENRATH_LOCAL_S3_PORT": str(s3_port),
        "OPENRATH_LOCAL_WEED_MASTER_PORT": str(master),
        "OPENRATH_LOCAL_WEED_VOLUME_PORT": str(volume),
        "OPENRATH_LOCAL_WEED_FILER_PORT": str(filer),
        "OPENRATH_LOCAL_WEED_GRPC_BASE": str(consecutive_free_ports(4)),
        "OPENRATH_LOCAL_WORKER_METRICS_PORT": str(worker_metrics),
        "OPENRATH_LOCAL_READY_TIMEOUT": "90",
        # Pinned (the default is one per CPU) so the connection bound below is this machine's own.
        "OPENRATH_LOCAL_WEB_WORKERS": str(WEB_WORKERS),
        "OPENRATH_WORKFLOW_MODULES": "tests.drills.workflows",
        # The caller's secret settings: the key is passed on as a file, the rest not at all.
        "OPENAI_API_KEY": CALLER_OPENAI_KEY,
        "S3_SECRET_ACCESS_KEY": "caller-s3-secret-" + secrets.token_hex(8),
    }
    for key in ("DATABASE_URL", "MIGRATION_DATABASE_URL", "REDIS_URL", "S3_BUCKET", "SECRET_KEY"):
        env.pop(key, None)
    try:
        yield env
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        admin.execute(f"DROP DATABASE IF EXISTS {env['OPENRATH_LOCAL_DB']} WITH (FORCE)")
        admin.execute(f"DROP ROLE IF EXISTS {env['OPENRATH_LOCAL_RUNTIME_ROLE']}")
        admin.execute(f"DROP ROLE IF EXISTS {env['OPENRATH_LOCAL_OWNER_ROLE']}")
        admin.close()
        subprocess.run(["redis-cli", "-n", redis_db, "flushdb"], capture_output=True, timeout=10)


def test_production_local_runs_a_workflow_through_celery_and_stops(local_instance, tmp_path):
    env = local_instance
    started = time.monotonic()
    result = subprocess.run(
        [str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=180, cwd=REPO
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    base = f"http://127.0.0.1:{env['OPENRATH_LOCAL_WEB_PORT']}"
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == f"url: {base}/"
    assert lines[-2] == f"env file: {env['OPENRATH_LOCAL_DIR']}/env"
    assert "OPENRATH_PROFILE=production" in result.stdout
    run_dir = Path(env["OPENRATH_LOCAL_DIR"])
    pids = {p.stem: int(p.read_text()) for p in (run_dir / "pids").glob("*.pid")}
    assert {"weed", "web", "worker", "beat"} <= set(pids)
    # uvicorn's supervisor and one process per worker
    assert len(_session_members(pids["web"])) >= WEB_WORKERS + 1

    status, ready = _request(f"{base}/readyz")
    assert status == 200, ready
    assert set(ready["checks"]) == {"database", "redis", "storage"}

    # The operator CLI with the same environment (the runtime role, production profile).
    instance_env = _read_env_file(run_dir / "env")
    assert instance_env["OPENRATH_PROFILE"] == "production"
    assert instance_env["DATABASE_URL"].startswith(
        f"postgres://{env['OPENRATH_LOCAL_RUNTIME_ROLE']}:"
    )
    for args in (("create_tenant", "local"), ("create_project", "local", "demo")):
        created = run_manage(*args, env=instance_env)
        assert created.returncode == 0, created.stderr
    issued = run_manage(
        "create_token", "local", "--grants", "runs:read,runs:write", env=instance_env
    )
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip().splitlines()[-1]

    steps_log = tmp_path / "steps.log"
    status, run = _request(
        f"{base}/api/v1/runs/",
        token=token,
        body={"workflow": "drill_steps", "project": "demo", "state": {"log": str(steps_log)}},
    )
    assert status == 201, run
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, current = _request(f"{base}/api/v1/runs/{run['id']}/", token=token)
        if current["status"] in {"succeeded", "failed", "needs_review", "timed_out"}:
            break
        time.sleep(0.2)
    assert current["status"] == "succeeded", current
    assert current["output"]["done"] == ["s1", "s2", "s3", "s4", "s5"]
    # After a run, so the Celery pool process that executed it is among those read.
    _assert_no_secret_in_environments(run_dir, pids)
    for pid in (p for name in ("web", "worker", "beat") for p in _session_members(pids[name])):
        assert env["S3_SECRET_ACCESS_KEY"] not in Path(f"/proc/{pid}/environ").read_text()
    # `restart` (the drills' way back after a kill) starts a process the same way.
    restarted = subprocess.run(
        [str(SCRIPT), "restart", "beat"], env=env, capture_output=True, text=True, timeout=120
    )
    assert restarted.returncode == 0, restarted.stderr
    pids["beat"] = int((run_dir / "pids" / "beat.pid").read_text())
    _assert_no_secret_in_environments(run_dir, pids)
    marks = [line.split()[0] for line in steps_log.read_text().splitlines()]
    assert marks == [f"{kind}:s{n}" for n in range(1, 6) for kind in ("start", "end")]
    status, events = _request(f"{base}/api/v1/runs/{run['id']}/events/", token=token)
    claims = [e for e in events["results"] if e["type"] == "run.claimed"]
    assert len(claims) == 1
    assert claims[0]["data"]["worker"].startswith("celery:")

    # A burst of concurrent requests: the ASGI server runs each one on a thread of its own, and
    # the web process's bounded pool keeps PostgreSQL connections from piling up per thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=30) as pool:
        statuses = list(
            pool.map(
                lambda _: _request(f"{base}/api/v1/runs/{run['id']}/", token=token)[0],
                range(240),
            )
        )
    assert statuses == [200] * 240
    with _admin_connection() as admin:
        (connections,) = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND usename = %s",
            (env["OPENRATH_LOCAL_DB"], env["OPENRATH_LOCAL_RUNTIME_ROLE"]),
        ).fetchone()
    # each web process's pool max (16) + the worker's and beat's own connections
    assert connections <= WEB_WORKERS * 16 + 8, connections

    # Metrics: the database gauges from the web process, the steps from the Celery worker's
    # port and (multiprocess directory) from the web process too.
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:  # noqa: S310
        web = _samples(response.read().decode())
    assert web[("openrath_runs", (("status", "succeeded"),))] == 1.0
    worker_url = f"http://127.0.0.1:{env['OPENRATH_LOCAL_WORKER_METRICS_PORT']}/metrics"
    with urllib.request.urlopen(worker_url, timeout=10) as response:  # noqa: S310
        worker = _samples(response.read().decode())
    step_count = (
        "openrath_step_duration_seconds_count",
        (("outcome", "completed"), ("workflow", "drill_steps")),
    )
    assert worker[step_count] == 5.0
    assert web[step_count] == 5.0

    stopped = subprocess.run(
        [str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip().splitlines()[-1] == "stopped"
    assert [name for name, pid in pids.items() if process_alive(pid)] == []
    assert list((run_dir / "pids").glob("*.pid")) == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(env["OPENRATH_LOCAL_WEB_PORT"])), timeout=2)
    assert time.monotonic() - started < 150

    # `destroy` removes what `start` made: the database, its roles, the Redis keys, the run dir.
    subprocess.run(
        ["redis-cli", "-n", env["OPENRATH_LOCAL_REDIS_DB"], "set", "left-behind", "1"],
        capture_output=True,
        timeout=10,
        check=True,
    )
    destroyed = subprocess.run(
        [str(SCRIPT), "destroy"], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert destroyed.returncode == 0, destroyed.stderr
    assert destroyed.stdout.strip().splitlines()[-1] == "destroyed"
    admin = _admin_connection()
    try:
        assert admin.execute(
            "SELECT count(*) FROM pg_database WHERE datname = %s", (env["OPENRATH_LOCAL_DB"],)
        ).fetchone() == (0,)
        roles = (env["OPENRATH_LOCAL_OWNER_ROLE"], env["OPENRATH_LOCAL_RUNTIME_ROLE"])
        assert admin.execute(
            "SELECT count(*) FROM pg_roles WHERE rolname = ANY(%s)", (list(roles),)
        ).fetchone() == (0,)
    finally:
        admin.close()
    assert (
        subprocess.run(
            ["redis-cli", "-n", env["OPENRATH_LOCAL_REDIS_DB"], "dbsize"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        == "0"
    )
    assert not run_dir.exists()


def test_production_local_explains_itself():
    shown = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    assert "destroy" in shown.stdout
    assert "OPENRATH_LOCAL_ADOPT_ROLES" in shown.stdout
    assert not shown.stdout.startswith("#")
    wrong = subprocess.run([str(SCRIPT), "launch"], capture_output=True, text=True, timeout=30)
    assert wrong.returncode == 2
    assert "--help" in wrong.stderr


def test_production_local_refuses_to_take_over_a_role_it_did_not_create(tmp_path):
    admin = _admin_connection()
    suffix = secrets.token_hex(4)
    foreign = f"openrath_foreign_{suffix}"
    admin.execute(f"CREATE ROLE {foreign} LOGIN PASSWORD 'theirs'")
    try:
        before = admin.execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (foreign,)
        ).fetchone()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OPENRATH_", "DJANGO_"))},
            "OPENRATH_LOCAL_DIR": str(tmp_path / "run"),
            "OPENRATH_LOCAL_PG_ADMIN_URL": _admin_url(),
            "OPENRATH_LOCAL_DB": f"openrath_pl_{suffix}",
            "OPENRATH_LOCAL_OWNER_ROLE": foreign,
            "OPENRATH_LOCAL_RUNTIME_ROLE": f"openrath_pl_app_{suffix}",
        }
        refused = subprocess.run(
            [str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
        )
        assert refused.returncode != 0
        assert f"role {foreign} exists and was not created by this script" in refused.stderr
        after = admin.execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (foreign,)
        ).fetchone()
        assert after == before
        assert admin.execute(
            "SELECT count(*) FROM pg_database WHERE datname = %s", (env["OPENRATH_LOCAL_DB"],)
        ).fetchone() == (0,)
    finally:
        admin.execute(f"DROP ROLE IF EXISTS {foreign}")
        admin.close()
