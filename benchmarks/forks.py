"""Forking a run from a checkpoint (issue 22) on PostgreSQL: rows written and time, small vs big.

    python benchmarks/forks.py            # full run; writes its section at the end of RESULTS.md
    python benchmarks/forks.py --quick    # fewer repeats, prints only

Two parent runs are built with bulk inserts of real rows of the real schema (not by executing
10,000 steps): *small*, whose working session holds 1,000 chunks and whose state went through 10
checkpoints, and *big*, 100,000 chunks and 10,000 checkpoints. Each checkpoint is stored as the
engine stores it: a delta against the previous state (``runs_app.state_delta.diff``), or the
whole state when the engine's own keyframe rule (``runs_app.services.Keyframes``) says so; each
checkpoint references the session at a length proportional to its number.

Then ``run_fork`` (the service behind ``POST /api/v1/runs/{id}/fork/``) forks each parent at its
last checkpoint with a next node and at its middle one, alternating small and big, each fork in a
transaction of its own. Measured: the rows each fork added, per table (exact counts of every
table before and after, outside the timing), that the parent's row is unchanged, and the median
wall time of a fork. Target: the same rows for both; median big / small <= 1.5.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import fresh_postgres, setup_django, write_section  # noqa: E402

SIZES = {"small": (1_000, 10), "big": (100_000, 10_000)}
CHUNK_BATCH = 5_000


def build_parent(project: Any, plan: Any, chunks: int, checkpoints: int) -> Any:
    """A succeeded run with ``checkpoints`` checkpoints over a session of ``chunks`` chunks."""
    from openrath_project.ids import uuid7
    from openrath_project.jsontext import canonical, digest
    from runs_app.models import Checkpoint, Run, RunEvent
    from runs_app.services import Keyframes
    from runs_app.state_delta import diff
    from sessions_app.models import Chunk, Session

    run_id = uuid7()
    session = Session.objects.create(
        tenant_id=project.tenant_id,
        project=project,
        title=f"bench {chunks}",
        own_len=chunks,
        run_id=run_id,
    )
    for start in range(0, chunks, CHUNK_BATCH):
        Chunk.objects.bulk_create(
            [
                Chunk(
                    tenant_id=project.tenant_id,
                    session=session,
                    seq=seq,
                    role="assistant",
                    content={"text": f"chunk {seq} " + "x" * 180},
                    run_id=run_id,
                    step="s",
                )
                for seq in range(start, min(chunks, start + CHUNK_BATCH))
            ]
        )
    keyframes = Keyframes()
    rows = []
    state: dict[str, Any] = {"n": 0, "topic": "refunds", "notes": []}
    for seq in range(1, checkpoints + 1):
        new = {**state, "n": seq, "last": f"step {seq}", "notes": [*state["notes"][-9:], seq]}
        state_len = len(canonical(new))
        delta = diff(state, new)
        delta_len = len(canonical(delta))
        full = seq == 1 or keyframes.keyframe_now(delta_len, state_len)
        keyframes.stored(full=full, length=state_len if full else delta_len)
        rows.append(
            Checkpoint(
                run_id=run_id,
                seq=seq,
                step="s",
                next_nodes=["s"] if seq < checkpoints else [],
                full=full,
                state=new if full else delta,
                state_digest=digest(new),
                session_id=session.id,
                session_len=chunks * seq // checkpoints,
                fencing_token=1,
            )
        )
        state = new
    run = Run.objects.create(
        id=run_id,
        tenant_id=project.tenant_id,
        project=project,
        workflow="bench_fork",
        plan=plan,
        status="succeeded",
        input={"n": 0, "topic": "refunds", "notes": []},
        state=state,
        state_seq=checkpoints,
        output=state,
        session=session,
        session_len=chunks,
        checkpoint_seq=checkpoints,
        event_seq=1,
    )
    Checkpoint.objects.bulk_create(rows, batch_size=2_000)
    RunEvent.objects.create(run=run, seq=1, type="run.created", data={})
    return run


def table_rows() -> dict[str, int]:
    """Rows in every table of the database (exact counts; nothing else writes to it)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        tables = [name for (name,) in cursor.fetchall()]
        counts = {}
        for name in tables:
            cursor.execute(f'SELECT count(*) FROM "{name}"')  # noqa: S608 - catalog names
            counts[name] = int(cursor.fetchone()[0])
    return counts


def fork_once(parent: Any, k: int) -> tuple[float, dict[str, int], bool]:
    """One timed fork: its wall time, the rows it added by table, and whether the parent's row
    is unchanged."""
    from runs_app.models import Run
    from runs_app.services.forks import run_fork

    before = table_rows()
    parent_row = Run.objects.filter(id=parent.id).values().get()
    started = time.perf_counter()
    child = run_fork(run=parent, checkpoint_seq=k, actor="bench")
    elapsed = time.perf_counter() - started
    after = table_rows()
    added = {name: after[name] - before[name] for name in after if after[name] != before[name]}
    unchanged = Run.objects.filter(id=parent.id).values().get() == parent_row
    # Outside the measurement: the fork is never executed, and must not fill the queue cap.
    Run.objects.filter(id=child.id).update(status="cancelled")
    return elapsed, added, unchanged


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeats = 7 if args.quick else 41
    setup_django(fresh_postgres("h1"))
    from openrath_project.jsontext import digest
    from openrath_project.tenancy.services import project_create, tenant_create
    from runs_app.models import Run, WorkflowPlan

    project = project_create(tenant=tenant_create(slug="bench"), slug="forks")
    definition = {"name": "bench_fork", "version": "1", "entry": "s", "nodes": []}
    plan = WorkflowPlan.objects.create(
        hash=digest(definition), name="bench_fork", definition=definition, graph={}
    )
    built = time.perf_counter()
    parents = {
        name: build_parent(project, plan, chunks, checkpoints)
        for name, (chunks, checkpoints) in SIZES.items()
    }
    build_s = time.perf_counter() - built
    points = {
        name: {"last": checkpoints - 1, "middle": checkpoints // 2}
        for name, (_chunks, checkpoints) in SIZES.items()
    }
    times: dict[tuple[str, str], list[float]] = {}
    parents_unchanged = True
    rows: dict[tuple[str, str], set[tuple[tuple[str, int], ...]]] = {}
    for name in SIZES:  # warm-up: plans, prepared statements, caches
        parent = Run.objects.select_related("plan").get(id=parents[name].id)
        fork_once(parent, points[name]["last"])
    for _ in range(repeats):
        for where in ("last", "middle"):
            for name in SIZES:
                parent = Run.objects.select_related("plan").get(id=parents[name].id)
                elapsed, added, unchanged = fork_once(parent, points[name][where])
                times.setdefault((name, where), []).append(elapsed)
                rows.setdefault((name, where), set()).add(tuple(sorted(added.items())))
                parents_unchanged = parents_unchanged and unchanged
    lines = [
        f"Parents built with bulk inserts in {build_s:.1f} s: small = 1,000 chunks and 10 "
        "checkpoints, big = 100,000 chunks and 10,000 checkpoints (state deltas with the "
        "engine's keyframe rule). Each fork in its own transaction; "
        f"{repeats} forks per cell, alternated.",
        "",
        "| fork at | small: median ms | big: median ms | big / small | rows added by each fork, "
        "per table (every table counted; the same for every fork of both sizes?) |",
        "| --- | --- | --- | --- | --- |",
    ]
    ratios = []
    for where in ("last", "middle"):
        small = statistics.median(times[("small", where)]) * 1000
        big = statistics.median(times[("big", where)]) * 1000
        ratios.append(big / small)
        seen = rows[("small", where)] | rows[("big", where)]
        same = "yes" if len(seen) == 1 else f"no ({len(seen)} different)"
        shown = ", ".join(f"{t} {n}" for t, n in sorted(next(iter(seen))))
        at = f"(small {points['small'][where]}, big {points['big'][where]})"
        label = f"k = last with a next node {at}" if where == "last" else f"k = middle {at}"
        lines.append(f"| {label} | {small:.2f} | {big:.2f} | {big / small:.2f} | {shown}; {same} |")
    worst = max(ratios)
    lines += [
        "",
        f"Worst median ratio big / small: **{worst:.2f}** (target <= 1.5: "
        f"{'met' if worst <= 1.5 else 'NOT met'}). Rows written do not depend on the chunks "
        "or checkpoints: one run, one checkpoint (the branch point, stored whole), one session "
        "and one lineage edge (no chunk copied), one run-fork edge, two events; the parent "
        f"row is not written (unchanged after every fork: {'yes' if parents_unchanged else 'NO'}).",
    ]
    body = "\n".join(lines)
    print(body)
    if not args.quick:
        write_section("forks", "Forking a run (issue 22)", body, "python benchmarks/forks.py")


if __name__ == "__main__":
    main()
