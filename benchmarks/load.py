"""HTTP load test against the production profile on this machine (issue 9).

    python benchmarks/load.py                      # 1 and 2 Celery worker processes
    python benchmarks/load.py --clients 10 --runs 5 --quick

Starts the whole production profile with ``deploy/bin/production-local`` (PostgreSQL roles,
Redis, SeaweedFS, uvicorn, Celery worker and beat), mints one token per client, and runs N
concurrent clients on 127.0.0.1: each creates a session, starts a run of a short workflow on
it, and polls the run until it ends. Bounded in count (clients x runs) and time
(``--max-seconds``). Reports completed/attempted, errors, throughput and the p50/p95/p99
lifecycle latency (create session -> run succeeded), with 1 and with 2 worker processes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    REPO,
    consecutive_free_ports,
    free_ports,
    manage,
    percentile,
    write_section,
)

SCRIPT = REPO / "deploy" / "bin" / "production-local"


def local_env(run_dir: Path, workers: int) -> dict[str, str]:
    web, s3, master, volume, filer, metrics = free_ports(6)
    return {
        **os.environ,
        "OPENRATH_LOCAL_DIR": str(run_dir),
        "OPENRATH_LOCAL_WEB_PORT": str(web),
        "OPENRATH_LOCAL_S3_PORT": str(s3),
        "OPENRATH_LOCAL_WEED_MASTER_PORT": str(master),
        "OPENRATH_LOCAL_WEED_VOLUME_PORT": str(volume),
        "OPENRATH_LOCAL_WEED_FILER_PORT": str(filer),
        "OPENRATH_LOCAL_WORKER_METRICS_PORT": str(metrics),
        "OPENRATH_LOCAL_WEED_GRPC_BASE": str(consecutive_free_ports(4)),
        "OPENRATH_LOCAL_DB": f"openrath_load_{os.getpid()}_{workers}",
        "OPENRATH_LOCAL_CELERY_CONCURRENCY": str(workers),
        "OPENRATH_WORKFLOW_MODULES": "benchmarks.load_workflows",
        "LOG_LEVEL": "WARNING",
    }


def drop_database(name: str) -> None:
    """The benchmark's throw-away database (production-local leaves data in place)."""
    import psycopg

    admin = os.environ.get("OPENRATH_LOCAL_PG_ADMIN_URL", "postgres://root@127.0.0.1:5432/postgres")
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def production_env(run_dir: Path) -> dict[str, str]:
    """The env file production-local wrote (the runtime settings of the running profile)."""
    env = dict(os.environ)
    for line in (run_dir / "env").read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            env[key] = value.strip("'")
    return env


def call(method: str, url: str, token: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1 only
        url,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - localhost
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()[:300]


def client(base: str, token: str, runs: int, deadline: float, out: list[dict[str, Any]]) -> None:
    for i in range(runs):
        if time.monotonic() > deadline:
            return
        started = time.monotonic()
        record: dict[str, Any] = {"ok": False}
        status, session = call(
            "POST",
            f"{base}/api/v1/sessions/",
            token,
            {"project": "load", "user_message": f"question {i}"},
        )
        if status != 201:
            out.append({**record, "error": f"session {status}: {session}"})
            continue
        status, run = call(
            "POST",
            f"{base}/api/v1/runs/",
            token,
            {"workflow": "load_short", "project": "load", "session": session["id"]},
        )
        if status != 201:
            out.append({**record, "error": f"run {status}: {run}"})
            continue
        while time.monotonic() < deadline:
            status, current = call("GET", f"{base}/api/v1/runs/{run['id']}/", token)
            if status == 200 and current["status"] in (
                "succeeded",
                "failed",
                "cancelled",
                "timed_out",
                "needs_review",
            ):
                break
            time.sleep(0.05)
        else:
            out.append({**record, "error": "timed out waiting for the run"})
            return
        record = {"ok": current["status"] == "succeeded", "latency": time.monotonic() - started}
        if not record["ok"]:
            record["error"] = f"run ended {current['status']}"
        out.append(record)


def measure(workers: int, clients: int, runs: int, max_seconds: float) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix="openrath-load-"))
    env = local_env(run_dir, workers)
    subprocess.run(
        [str(SCRIPT), "start"],
        cwd=REPO,
        env=env,
        check=True,
        timeout=300,
        stdout=subprocess.DEVNULL,
    )
    try:
        prod = production_env(run_dir)
        manage(prod, "create_tenant", "load")
        manage(prod, "create_project", "load", "load")
        tokens = [
            manage(
                prod,
                "create_token",
                "load",
                "--grants",
                "sessions:write,runs:write,runs:read",
                "--name",
                f"client-{i}",
            )
            for i in range(clients)
        ]
        base = f"http://127.0.0.1:{env['OPENRATH_LOCAL_WEB_PORT']}"
        results: list[dict[str, Any]] = []
        deadline = time.monotonic() + max_seconds
        threads = [
            threading.Thread(target=client, args=(base, t, runs, deadline, results)) for t in tokens
        ]
        began = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - began
    finally:
        subprocess.run(
            [str(SCRIPT), "stop"], cwd=REPO, env=env, timeout=120, stdout=subprocess.DEVNULL
        )
        drop_database(env["OPENRATH_LOCAL_DB"])
    latencies = [r["latency"] for r in results if r["ok"]]
    errors = [r["error"] for r in results if not r["ok"]]
    return {
        "workers": workers,
        "attempted": clients * runs,
        "completed": len(latencies),
        "errors": len(errors),
        "error_examples": errors[:3],
        "runs_per_s": len(latencies) / elapsed,
        "p50": percentile(latencies, 0.5) if latencies else float("nan"),
        "p95": percentile(latencies, 0.95) if latencies else float("nan"),
        "p99": percentile(latencies, 0.99) if latencies else float("nan"),
        "seconds": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--runs", type=int, default=10, help="runs per client")
    parser.add_argument("--max-seconds", type=float, default=300)
    parser.add_argument("--quick", action="store_true", help="print only")
    args = parser.parse_args()
    rows = [measure(workers, args.clients, args.runs, args.max_seconds) for workers in (1, 2)]
    lines = [
        f"{args.clients} concurrent clients x {args.runs} runs each (create session, start a "
        "3-step run, poll until it ends), production profile (uvicorn, Celery, Redis, "
        "PostgreSQL with separate roles, SeaweedFS) on this machine.\n",
        "| worker processes | completed / attempted | errors | runs/s | p50 s | p95 s | p99 s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['workers']} | {row['completed']} / {row['attempted']} | {row['errors']} | "
            f"{row['runs_per_s']:.1f} | {row['p50']:.3f} | {row['p95']:.3f} | {row['p99']:.3f} |"
        )
    for row in rows:
        if row["error_examples"]:
            lines.append(f"\nErrors with {row['workers']} worker(s): {row['error_examples']}")
    lines.append(
        "\nThe 20 client threads, uvicorn, the Celery worker(s), beat, Redis, SeaweedFS and "
        "PostgreSQL share this machine's two cores, so a second worker process cannot add "
        "CPU: compare the rows as a ratio, and expect worker scaling on a machine with more "
        "cores (or the workers on their own hosts)."
    )
    body = "\n".join(lines) + "\n"
    print(body)
    if not args.quick:
        write_section(
            "load",
            "HTTP load test (production profile)",
            body,
            f"python benchmarks/load.py --clients {args.clients} --runs {args.runs}",
        )


if __name__ == "__main__":
    main()
