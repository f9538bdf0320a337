"""Rows read per submission and per durable step, by table (issue 20, item 3).

    python benchmarks/reads.py [--sessions 3000] [--runs-table 20000]
                               [--database openrath_bench_reads]

W1-shaped: 20 runs of 20 steps, each step appending one 200-byte chunk, executed by
``run_one`` in this process. ``pg_stat_user_tables`` is read before and after (each backend's
counters flushed first), so a row counts whether the ORM, the composed step statement or a
foreign-key check read it. ``--sessions`` first creates that many other sessions and
``--runs-table`` that many finished runs, each with its own session (copies of a finished
warm-up run, inserted by one statement each), then ``ANALYZE``, so the planner picks the
index scans it would on a real database rather than scanning tiny tables (a foreign-key check
of a 22-row runs table is a sequential scan of it). It also counts the transactions this
process commits while the runs execute: every libpq request sent outside a transaction opens
one, a ``BEGIN`` or a statement in autocommit (``PSYCOPG_IMPL=python``, which the script sets
for itself; Django's health-check ``SELECT 1`` counted apart). Prints tables; writes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import ROUND_TRIP_METHODS, fresh_postgres, setup_django  # noqa: E402
from benchmarks.runs import create_runs, workflow_module  # noqa: E402

RUNS, STEPS = 20, 20


def count_transactions() -> dict[str, int]:
    """Count, from now on, the transactions and requests of this process's connections."""
    import psycopg.pq

    assert psycopg.pq.__impl__ == "python"
    counts = {"transactions": 0, "requests": 0, "health": 0}
    pgconn = psycopg.pq.PGconn
    for name in ROUND_TRIP_METHODS:
        original = getattr(pgconn, name)

        def counted(self, *args, _original=original, **kwargs):
            query = args[0] if args else b""
            counts["requests"] += 1
            if isinstance(query, bytes) and query.strip() == b"SELECT 1":
                counts["health"] += 1
            elif self.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                counts["transactions"] += 1
            return _original(self, *args, **kwargs)

        setattr(pgconn, name, counted)
    return counts


def fill_runs(count: int) -> None:
    """``count`` finished runs, each with its own session: copies of the newest finished run
    and its session, one ``INSERT ... SELECT`` per table (ids derived from the series)."""
    from django.db import connection

    from runs_app.models import Run
    from sessions_app.models import Session

    template = Run.objects.filter(status="succeeded").order_by("-id").first()
    assert template is not None
    assert template.session_id is not None

    def copy(model, source_id, replace: dict[str, str]) -> None:
        quote = connection.ops.quote_name
        columns = [f.column for f in model._meta.concrete_fields]
        values = [replace.get(column, f"t.{quote(column)}") for column in columns]
        table = quote(model._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({', '.join(quote(c) for c in columns)}) "  # noqa: S608
                f"SELECT {', '.join(values)} FROM {table} AS t, generate_series(1, %s) AS g "
                "WHERE t.id = %s",
                [count, source_id],
            )

    session_id = "md5(g::text || 'session')::uuid"
    copy(Session, template.session_id, {"id": session_id, "writer_run_id": "NULL"})
    copy(
        Run,
        template.id,
        {
            "id": "md5(g::text || 'run')::uuid",
            "session_id": session_id,
            "idempotency_key": "NULL",
        },
    )


def snapshot(url: str) -> dict[str, tuple[int, ...]]:
    """Per table: rows read by sequential scans, rows fetched by index scans, the two scan
    counts and rows written, once every backend of this process has reported its counters."""
    import psycopg
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    connection.close()  # the backend reports its counters as its session ends
    time.sleep(0.6)
    with psycopg.connect(url) as other:
        other.execute("SELECT pg_stat_clear_snapshot()")
        rows = other.execute(
            "SELECT relname, coalesce(seq_tup_read, 0), coalesce(idx_tup_fetch, 0), seq_scan,"
            " coalesce(idx_scan, 0), n_tup_ins + n_tup_upd FROM pg_stat_user_tables"
        ).fetchall()
    return {row[0]: tuple(row[1:]) for row in rows}


def report(before: dict, after: dict, per: int, label: str) -> None:
    print(f"\n{label} (per {per})")
    print("| table | rows read (seq) | rows fetched (index) | seq scans | index scans | written |")
    print("|---|---:|---:|---:|---:|---:|")
    total = 0.0
    for table in sorted(after):
        delta = [after[table][i] - before.get(table, (0,) * 5)[i] for i in range(5)]
        if any(delta):
            total += delta[0] + delta[1]
            cells = " | ".join(f"{value / per:.2f}" for value in delta)
            print(f"| {table} | {cells} |")
    print(f"rows read per {label}: {total / per:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=3000, help="other sessions first")
    parser.add_argument("--runs-table", type=int, default=20000, help="other finished runs")
    parser.add_argument("--database", default="openrath_bench_reads", help="dropped and made anew")
    parser.add_argument("--server", default="postgres://root@127.0.0.1:5432")
    args = parser.parse_args()
    if os.environ.get("PSYCOPG_IMPL") != "python":  # count requests at the libpq boundary
        os.execve(  # noqa: S606 - this same script again, with the pure-Python binding
            sys.executable, [sys.executable, *sys.argv], {**os.environ, "PSYCOPG_IMPL": "python"}
        )
    module_dir = Path(tempfile.mkdtemp(prefix="openrath-bench-wf-"))
    module = workflow_module(module_dir)
    sys.path.insert(0, str(module_dir))
    os.environ["OPENRATH_WORKFLOW_MODULES"] = module
    os.environ["OPENRATH_DISPATCH"] = "none"
    url = fresh_postgres(args.database, args.server)
    setup_django(url)

    from django.db import connection

    from openrath_project.tenancy.services import project_create, tenant_create
    from runs_app.executor import run_one
    from runs_app.registration import workflows
    from sessions_app import services as session_services

    tenant = tenant_create(slug="bench")
    project = project_create(tenant=tenant, slug="bench")
    registry = workflows()
    for i in range(args.sessions):
        session_services.session_create(project=project, title=f"other {i}", chunks=[])
    create_runs(project, registry.get("bench20"), 2)  # warm-up: prepared statements, caches
    while run_one("bench-reads", registry=registry) is not None:
        pass
    if args.runs_table:
        fill_runs(args.runs_table)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    create_runs(project, registry.get("bench20"), 2)  # warm again after the fill
    while run_one("bench-reads", registry=registry) is not None:
        pass
    start = snapshot(url)
    create_runs(project, registry.get("bench20"), RUNS)
    submitted = snapshot(url)
    counts = count_transactions()
    while run_one("bench-reads", registry=registry) is not None:
        pass
    during = dict(counts)
    executed = snapshot(url)
    report(start, submitted, RUNS, "submission")
    report(submitted, executed, RUNS * STEPS, "step (claim and finish included)")
    steps = RUNS * STEPS
    print(
        f"\nexecuting {RUNS} runs x {STEPS} steps: {during['transactions'] / steps:.3f} "
        f"transactions a step (claim and finish included; the empty claim that ends the loop "
        f"too), {during['requests'] / steps:.3f} requests a step, {during['health']} health "
        "checks"
    )


if __name__ == "__main__":
    main()
