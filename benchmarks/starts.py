"""What starting a run costs (issue 20, item 5): creating it and claiming it, up to its first step.

    python benchmarks/starts.py [--runs 300] [--database openrath_bench_starts]

One process, PostgreSQL, the embedded worker path: ``services.run_create`` of a one-step
workflow, then ``run_one`` claims and executes it. Timed in this process with
``time.perf_counter``: the ``run_create`` call, and from entering ``run_one`` to entering the
step's handler (the claim, reading the run and its session, building the workflow), so the
step's own commit is not part of the start. Runs are created and executed alternately, one at
a time (the queue never holds more than one run), after warm-up runs.

In a child process (``PSYCOPG_IMPL=python``, the pure-Python libpq binding, counts only) every
request libpq sends is counted, and every transaction: a request sent while the connection is
idle (outside a transaction) opens one, whether it is ``BEGIN`` or a statement in autocommit.
Django's connection health check (``SELECT 1`` after ``close_old_connections``, which
``run_one`` calls before each claim) is counted apart. The empty claim that ends a worker's
loop is not part of a start and is not run here. Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    REPO,
    ROUND_TRIP_METHODS,
    fresh_postgres,
    percentile,
    setup_django,
)

WORKFLOW = textwrap.dedent("""
    import time

    from openrath_project import flow

    ENTERED = []


    class StartOne(flow.Workflow):
        name = "start_one"

        @flow.step(entry=True, successors=(), effects="none")
        def only(self, state, ctx):
            ENTERED.append(time.perf_counter())
            return state
""")


def workflow_module(directory: Path) -> str:
    (directory / "bench_starts.py").write_text(WORKFLOW)
    return "bench_starts"


def _project():
    from openrath_project.tenancy.models import Project
    from openrath_project.tenancy.services import project_create, tenant_create

    found = Project.objects.filter(slug="bench").first()
    if found is not None:
        return found
    return project_create(tenant=tenant_create(slug="bench"), slug="bench")


def timed_starts(runs: int) -> dict[str, list[float]]:
    """``runs`` starts, each created then executed; seconds of each part."""
    import importlib

    from runs_app import services
    from runs_app.executor import run_one
    from runs_app.registration import workflows

    entered = importlib.import_module("bench_starts").ENTERED
    project = _project()
    registry = workflows()
    registered = registry.get("start_one")
    samples: dict[str, list[float]] = {"create": [], "claim": [], "start": [], "cpu": []}
    for index in range(runs + 20):  # the first 20: warm-up (prepared statements, caches)
        cpu = time.process_time()
        began = time.perf_counter()
        services.run_create(project=project, workflow=registered, state={"i": index})
        created = time.perf_counter()
        cpu_created = time.process_time()
        outcome = run_one("bench-starts", registry=registry)
        assert outcome is not None
        assert outcome.status == "succeeded", outcome
        if index >= 20:
            samples["create"].append(created - began)
            samples["claim"].append(entered[-1] - created)
            samples["start"].append(entered[-1] - began)
            samples["cpu"].append(cpu_created - cpu)
    return samples


def counted_starts(runs: int) -> dict[str, float]:
    """In a child with ``PSYCOPG_IMPL=python``: requests and transactions per create and per
    claim (up to the end of the one-step run)."""
    import psycopg.pq
    from django.db import connection

    from runs_app import services
    from runs_app.executor import run_one
    from runs_app.registration import workflows

    assert psycopg.pq.__impl__ == "python", "run with PSYCOPG_IMPL=python"
    counts: dict[str, Any] = {"requests": 0, "transactions": 0, "health": 0, "statements": []}
    pgconn = psycopg.pq.PGconn
    for name in ROUND_TRIP_METHODS:
        original = getattr(pgconn, name)

        def counted(self, *args, _original=original, **kwargs):
            counts["requests"] += 1
            query = args[0] if args else b""
            text = query.decode(errors="replace") if isinstance(query, bytes) else str(query)
            if text.strip() == "SELECT 1":
                counts["health"] += 1
            elif self.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                counts["transactions"] += 1
            counts["statements"].append(" ".join(text.split())[:90])
            return _original(self, *args, **kwargs)

        setattr(pgconn, name, counted)

    project = _project()
    registry = workflows()
    registered = registry.get("start_one")
    connection.ensure_connection()
    result: dict = {}
    for phase in ("warm", "counted"):
        totals = {"create": [0, 0, 0], "claim": [0, 0, 0]}
        for index in range(runs):
            for part in ("create", "claim"):
                counts.update(requests=0, transactions=0, health=0, statements=[])
                if part == "create":
                    services.run_create(project=project, workflow=registered, state={"i": index})
                else:
                    assert run_one("bench-starts-count", registry=registry) is not None
                # The claim's part ends with the one-step run's own step commit (one
                # composed statement, its own transaction): not part of the start.
                own = 1 if part == "claim" else 0
                totals[part][0] += counts["requests"] - own
                totals[part][1] += counts["transactions"] - own
                totals[part][2] += counts["health"]
                if phase == "counted" and index == runs - 1:
                    result[f"{part}_statements"] = counts["statements"]
        if phase == "counted":
            for part, (requests, transactions, health) in totals.items():
                result[part] = {
                    "requests": requests / runs,
                    "transactions": transactions / runs,
                    "health": health / runs,
                }
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--database", default="openrath_bench_starts", help="dropped, made anew")
    parser.add_argument("--server", default="postgres://root@127.0.0.1:5432")
    parser.add_argument("--statements", action="store_true", help="list the counted requests")
    parser.add_argument("--count", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count:  # the child: the same database, already migrated
        setup_django(args.count)
        print(json.dumps(counted_starts(20)))
        return
    module_dir = Path(tempfile.mkdtemp(prefix="openrath-bench-starts-"))
    module = workflow_module(module_dir)
    sys.path.insert(0, str(module_dir))
    os.environ["OPENRATH_WORKFLOW_MODULES"] = module
    os.environ["OPENRATH_DISPATCH"] = "none"
    url = fresh_postgres(args.database, args.server)
    setup_django(url)
    load_before = os.getloadavg()[0]
    samples = timed_starts(args.runs)
    load_after = os.getloadavg()[0]
    child = subprocess.run(
        [sys.executable, __file__, "--count", url],
        env={
            **os.environ,
            "PSYCOPG_IMPL": "python",
            "PYTHONPATH": f"{REPO}{os.pathsep}{module_dir}",
        },
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if child.returncode != 0:
        raise RuntimeError(f"the counting child failed:\n{child.stderr}")
    counts = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"{args.runs} starts, one process; load average {load_before:.1f} -> {load_after:.1f}")
    print(
        f"`run_create` CPU time of this process, p50: "
        f"{statistics.median(samples['cpu']) * 1000:.3f} ms (less sensitive to load than wall time)"
    )
    print("| part | ms p50 | ms p90 | requests | transactions | health checks |")
    print("|---|---:|---:|---:|---:|---:|")
    for part, label in (("create", "`run_create`"), ("claim", "claim -> first step")):
        values = samples[part]
        print(
            f"| {label} | {statistics.median(values) * 1000:.3f} | "
            f"{percentile(values, 0.9) * 1000:.3f} | {counts[part]['requests']:.2f} | "
            f"{counts[part]['transactions']:.2f} | {counts[part]['health']:.2f} |"
        )
    start = samples["start"]
    transactions = counts["create"]["transactions"] + counts["claim"]["transactions"]
    requests = counts["create"]["requests"] + counts["claim"]["requests"]
    print(
        f"| **start** (create + claim -> first step) | **{statistics.median(start) * 1000:.3f}** "
        f"| {percentile(start, 0.9) * 1000:.3f} | {requests:.2f} | **{transactions:.2f}** | "
        f"{counts['create']['health'] + counts['claim']['health']:.2f} |"
    )
    if args.statements:
        for part in ("create", "claim"):
            print(f"\n{part}:")
            for statement in counts[f"{part}_statements"]:
                print("   ", statement)


if __name__ == "__main__":
    main()
