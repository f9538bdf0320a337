"""Retention on a project with 10,000 runs: bytes before and after a pass, and the pruning rate.

The project holds ``--conversations`` root sessions (6 chunks each); every run works in its own
fork of one of them (4 more chunks), has ``--steps`` checkpoints (the first whole, then deltas,
as the engine stores them) and as many events plus its start and end, and finished at a time
spread evenly over the last 100 days. The policy removes runs and sessions older than 30 days
and keeps the newest 2 checkpoints and 5 events of every kept run (so kept runs are compacted).
The pass runs as the reconciler runs it: bounded passes of ``--budget`` seconds until complete.

Rows are bulk-inserted (the ORM's ``bulk_create``; the same rows the engine writes). Bytes are
the live rows' ``pg_column_size`` and each table's ``pg_total_relation_size`` before, after the
pass (PostgreSQL keeps the dead rows' space until a vacuum), and after ``VACUUM FULL``.

    python benchmarks/retention.py [--runs 10000] [--write]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import fresh_postgres, setup_django, write_section  # noqa: E402

TABLES = (
    ("runs_app_run", "runs"),
    ("runs_app_runevent", "events"),
    ("runs_app_checkpoint", "checkpoints"),
    ("sessions_app_session", "sessions"),
    ("sessions_app_chunk", "chunks"),
    ("sessions_app_lineageedge", "lineage edges"),
)


def build(runs: int, conversations: int, steps: int) -> Any:
    """Bulk-insert the project; returns it."""
    from django.utils import timezone

    from openrath_project.ids import uuid7
    from openrath_project.jsontext import digest
    from openrath_project.tenancy.services import project_create, tenant_create
    from runs_app.models import Checkpoint, Run, RunEvent, WorkflowPlan
    from runs_app.state_delta import diff
    from sessions_app.models import Chunk, LineageEdge, Session

    tenant = tenant_create(slug="bench")
    project = project_create(tenant=tenant, slug="retention")
    plan = WorkflowPlan.objects.create(
        hash="b" * 64, name="bench-agent", definition={"nodes": []}, graph={}
    )
    now = timezone.now()
    rng = random.Random(7)
    text = "The quick brown fox jumps over the lazy dog. " * 4

    def chunk(session_id: uuid.UUID, seq: int, role: str, when: Any) -> Chunk:
        return Chunk(
            tenant_id=tenant.id,
            session_id=session_id,
            seq=seq,
            role=role,
            kind="message",
            content={"text": f"{role} {seq}: {text}"},
            created_at=when,
        )

    roots = []
    chunks: list[Chunk] = []
    for _ in range(conversations):
        when = now - timedelta(days=100)
        root = Session(id=uuid7(), tenant_id=tenant.id, project=project, own_len=6, op="create")
        roots.append(root)
        chunks += [chunk(root.id, s, "user" if s % 2 == 0 else "assistant", when) for s in range(6)]
    Session.objects.bulk_create(roots, batch_size=2000)
    sessions, edges, run_rows, checkpoints, events = [], [], [], [], []
    for index in range(runs):
        age = timedelta(days=100 * (runs - index) / runs)
        when = now - age
        root = roots[rng.randrange(conversations)]
        working = Session(
            id=uuid7(),
            tenant_id=tenant.id,
            project=project,
            op="fork",
            base_id=root.id,
            base_len=6,
            own_len=4,
        )
        sessions.append(working)
        edges.append(
            LineageEdge(
                tenant_id=tenant.id, parent_id=root.id, child_id=working.id, op="fork", parent_len=6
            )
        )
        chunks += [chunk(working.id, s, "assistant", when) for s in range(6, 10)]
        run = Run(
            id=uuid7(),
            tenant_id=tenant.id,
            project=project,
            workflow="bench-agent",
            plan=plan,
            status="succeeded",
            input={"question": f"question {index}"},
            session_id=working.id,
            checkpoint_seq=steps,
            event_seq=steps + 2,
            session_len=10,
            started_at=when,
            finished_at=when,
        )
        state: dict[str, Any] = {"question": f"question {index}", "notes": [], "step": 0}
        previous = state
        for seq in range(1, steps + 1):
            state = {
                **previous,
                "notes": [*previous["notes"], f"note {seq}: {text[:60]}"],
                "step": seq,
            }
            checkpoints.append(
                Checkpoint(
                    run_id=run.id,
                    seq=seq,
                    step=f"step{seq}",
                    next_nodes=[f"step{seq + 1}"] if seq < steps else [],
                    full=seq == 1,
                    state=state if seq == 1 else diff(previous, state),
                    state_digest=digest(state),
                    session_id=working.id,
                    session_len=10,
                    fencing_token=1,
                    created_at=when,
                )
            )
            previous = state
        run.state, run.output, run.state_seq = state, state, steps
        run_rows.append(run)
        events.append(RunEvent(run_id=run.id, seq=1, type="run.started", data={}, created_at=when))
        events += [
            RunEvent(
                run_id=run.id,
                seq=seq + 1,
                type="step.completed",
                step=f"step{seq}",
                data={"attempt": 1, "next": [], "checkpoint": seq, "chunks": 1},
                created_at=when,
            )
            for seq in range(1, steps + 1)
        ]
        events.append(
            RunEvent(run_id=run.id, seq=steps + 2, type="run.succeeded", data={}, created_at=when)
        )
    Session.objects.bulk_create(sessions, batch_size=2000)
    LineageEdge.objects.bulk_create(edges, batch_size=2000)
    Chunk.objects.bulk_create(chunks, batch_size=5000)
    Run.objects.bulk_create(run_rows, batch_size=2000)
    Checkpoint.objects.bulk_create(checkpoints, batch_size=5000)
    RunEvent.objects.bulk_create(events, batch_size=5000)
    # created_at is auto_now_add: set the times the rows would have had.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_app_run SET created_at = finished_at, updated_at = finished_at")
        cursor.execute(
            "UPDATE sessions_app_session s SET created_at = r.finished_at, "
            "updated_at = r.finished_at FROM runs_app_run r WHERE r.session_id = s.id"
        )
        cursor.execute(
            "UPDATE sessions_app_session SET created_at = %s, updated_at = %s "
            "WHERE base_id IS NULL",
            [now - timedelta(days=100), now - timedelta(days=100)],
        )
        cursor.execute("ANALYZE")
    return project


def measure() -> dict[str, dict[str, int]]:
    from django.db import connection

    out = {}
    with connection.cursor() as cursor:
        for table, _ in TABLES:
            cursor.execute(
                f"SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0), "  # noqa: S608
                f"pg_total_relation_size('{table}') FROM {table} t"
            )
            rows, live, total = cursor.fetchone()
            out[table] = {"rows": rows, "live": int(live), "total": int(total)}
    return out


def vacuum_full() -> dict[str, int]:
    from django.db import connection

    out = {}
    with connection.cursor() as cursor:
        for table, _ in TABLES:
            cursor.execute(f"VACUUM FULL {table}")
            cursor.execute(f"SELECT pg_total_relation_size('{table}')")
            out[table] = int(cursor.fetchone()[0])
    return out


def mib(n: float) -> str:
    return f"{n / (1024 * 1024):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--conversations", type=int, default=1_000)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--budget", type=float, default=5.0, help="seconds per pass")
    parser.add_argument("--database", default="openrath_bench_retention", help="dropped, made anew")
    parser.add_argument("--server", default="postgres://root@127.0.0.1:5432")
    parser.add_argument("--write", action="store_true", help="write benchmarks/RESULTS.md")
    args = parser.parse_args()
    os.environ["OPENRATH_DISPATCH"] = "none"
    setup_django(fresh_postgres(args.database, args.server))
    from retention_app import services
    from retention_app.models import RetentionPolicy
    from runs_app.models import Checkpoint, Run

    started = time.perf_counter()
    project = build(args.runs, args.conversations, args.steps)
    build_seconds = time.perf_counter() - started
    before = measure()
    policy = services.policy_create(
        project=project,
        created_by="benchmark",
        runs_max_age_seconds=30 * 86400,
        sessions_max_age_seconds=30 * 86400,
        checkpoints_keep_last=2,
        events_keep_last=5,
    )
    started = time.perf_counter()
    forecast = services.retention_dry_run(policy=policy)
    dry_seconds = time.perf_counter() - started
    load_before = os.getloadavg()[0]
    passes = 0
    removed: dict[str, int] = {}
    compacted = 0
    started = time.perf_counter()
    while True:
        policy = (
            RetentionPolicy.objects.unscoped().select_related("project__tenant").get(id=policy.id)
        )
        report = services.retention_apply(
            policy=policy, trigger="command", actor="benchmark", budget_seconds=args.budget
        )
        passes += 1
        compacted += report.compacted
        for kind, m in report.removed.items():
            removed[kind] = removed.get(kind, 0) + m["count"]
        if report.complete or report.failures:
            break
    pass_seconds = time.perf_counter() - started
    load_after = os.getloadavg()[0]
    after = measure()
    after_vacuum = vacuum_full()
    kept_runs = Run.objects.unscoped().count()
    rebuilt = 0
    from runs_app.services.checkpoints import run_state_at

    for run in Run.objects.unscoped().order_by("?")[:200]:  # spot check: kept state rebuilds
        for seq in Checkpoint.objects.filter(run=run).values_list("seq", flat=True):
            run_state_at(run, seq)
            rebuilt += 1

    forecast_runs = forecast.removed.get("runs", {}).get("count", 0)
    forecast_chunks = forecast.removed.get("chunks", {}).get("count", 0)
    rows_removed = sum(v for k, v in removed.items() if k != "artifacts")
    lines = [
        f"{args.runs:,} succeeded runs in one project ({args.conversations:,} root sessions of 6 "
        f"chunks; each run forks one and adds 4 chunks; {args.steps} checkpoints and "
        f"{args.steps + 2} events per run), finished evenly over 100 days; built in "
        f"{build_seconds:.0f} s. Policy: runs and sessions older than 30 days, keep the newest "
        "2 checkpoints and 5 events of each kept run.",
        "",
        "| table | rows before | rows after | live MiB before | live MiB after "
        "| on disk MiB before | after pass | after VACUUM FULL |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    totals = [0, 0, 0, 0, 0, 0, 0]
    for table, label in TABLES:
        b, a, v = before[table], after[table], after_vacuum[table]
        lines.append(
            f"| {label} | {b['rows']:,} | {a['rows']:,} | {mib(b['live'])} | {mib(a['live'])} "
            f"| {mib(b['total'])} | {mib(a['total'])} | {mib(v)} |"
        )
        for i, n in enumerate(
            (b["rows"], a["rows"], b["live"], a["live"], b["total"], a["total"], v)
        ):
            totals[i] += n
    lines.append(
        f"| **all** | {totals[0]:,} | {totals[1]:,} | {mib(totals[2])} | {mib(totals[3])} "
        f"| {mib(totals[4])} | {mib(totals[5])} | {mib(totals[6])} |"
    )
    runs_removed = removed.get("runs", 0)
    lines += [
        "",
        f"Pass: {passes} bounded passes of {args.budget:g} s (as the reconciler runs them) in "
        f"{pass_seconds:.1f} s: {runs_removed:,} runs and {rows_removed:,} rows removed "
        f"({runs_removed / pass_seconds:,.0f} runs/s, {rows_removed / pass_seconds:,.0f} rows/s), "
        f"{compacted:,} checkpoints made keyframes; {kept_runs:,} runs kept. Removed by kind: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(removed.items()) if v)
        + ".",
        f"Dry run first: {dry_seconds:.1f} s, forecast {forecast_runs:,} runs / "
        f"{forecast_chunks:,} chunks "
        f"({mib(sum(m['bytes'] for m in forecast.removed.values()))} MiB of rows).",
        f"Spot check: {rebuilt} kept checkpoints of 200 kept runs rebuilt to their digests.",
        f"Load average {load_before:.1f} before the pass, {load_after:.1f} after.",
    ]
    body = "\n".join(lines)
    print(body)
    if args.write:
        command = "python benchmarks/retention.py " + " ".join(sys.argv[1:])
        write_section(
            "retention", "Lineage-aware retention (issue 23 item 5)", body, command.strip()
        )


if __name__ == "__main__":
    main()
