"""Tenant-fair claims (issue 23 item 3): does a deep backlog of one tenant delay another's run?

    python benchmarks/fairness.py [--sizes 1000,10000,50000] [--waits 5] [--rounds 7]
                                  [--claims 150] [--runs 100] [--write]

One process, PostgreSQL, one claimer (the worst case for fairness: every tenant has 0 running
runs at each claim, so only the order decides). For each backlog size N, tenant A gets N queued
runs, each with a working session of its own as ``run_create`` makes them, inserted with one
``INSERT ... SELECT generate_series`` (older than anything B submits), then:

* **B's wait**: tenant B submits one run (``services.run_create``); the claimer claims
  (``lease_claim``) and finishes each run it gets (an untimed ``UPDATE`` to ``succeeded``, as
  its worker would) until it gets B's run. Measured: the claims before B's, and the time from
  B's submission to its claim. Repeated ``--waits`` times. The same with the claim order before
  this change (priority, then age: the previous statement, kept below as ``_OLD_CLAIM_SQL``),
  up to ``--old-cap`` claims; B's position in that order is also counted with SQL;
* **the claim statement**: each claim's time (p50 of the wait loops and of the throughput
  rounds) and the shared buffers one claim touches (``EXPLAIN (ANALYZE, BUFFERS)`` of the
  statement, rolled back): the index probes of the fair claim do not grow with N;
* **claim-only throughput** (the worst case for the fair statement: a claim and nothing else):
  ``--rounds`` rounds of ``--claims`` fair and ``--claims`` old claims, alternating claim by
  claim in the same process on the same backlog (each claimed run put back in the queue untimed,
  so the backlog keeps its size); claims per second of each, and the ratio fair / old of each
  round;
* **run throughput** (what a worker delivers): ``--rounds`` rounds of ``--runs`` runs executed
  with each order, alternating run by run: ``runs_app.executor.run_one`` claims a run, executes
  its one step (a checkpoint commit) and finishes it, the old order by the old statement in
  place of the fair one, everything else the same; each executed run is replaced by a new
  queued one, untimed. Runs per second of each, and the ratio fair / old of each round.

Prints a table; ``--write`` replaces the ``fairness`` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    fresh_postgres,
    percentile,
    setup_django,
    write_section,
)

WORKFLOW = textwrap.dedent("""
    from openrath_project import flow


    class FairOne(flow.Workflow):
        name = "fair_one"

        @flow.step(entry=True, successors=(), effects="none")
        def only(self, state, ctx):
            return state
""")

# The claim before tenant-fair claims (runs_app/services/leases.py at 553bdf5): the same
# statement with its session writer, event and returned rows (a leading TRUE, so its row has
# the layout ``leases._claimed`` reads); only the pick differs.
_OLD_CLAIM_SQL = """
WITH picked AS (
    SELECT id FROM runs_app_run
    WHERE status = 'queued' AND (wake_at IS NULL OR wake_at <= now()) AND workflow <> ''
    ORDER BY priority DESC, created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), r AS (
    UPDATE runs_app_run AS run
    SET status = 'running', fencing_token = run.fencing_token + 1, lease_owner = %(worker)s,
        lease_expires_at = now() + make_interval(secs => %(lease)s),
        started_at = COALESCE(run.started_at, now()), wake_at = NULL,
        event_seq = run.event_seq + 1, updated_at = now()
    FROM picked
    WHERE run.id = picked.id
    RETURNING run.*
), w AS ({writer}
), e AS (
    INSERT INTO runs_app_runevent (run_id, seq, type, step, data, created_at)
    SELECT r.id, r.event_seq, 'run.claimed', '',
           jsonb_build_object('worker', %(worker)s::text, 'token', r.fencing_token,
                              'attempt', r.attempt),
           now()
    FROM r
)
SELECT TRUE, r.id, r.fencing_token, r.event_seq, (SELECT length FROM w), {rows}
FROM r JOIN tenancy_project AS project ON project.id = r.project_id
LEFT JOIN sessions_app_session AS session ON session.id = r.session_id
"""


def workflow_module(directory: Path) -> str:
    (directory / "bench_fairness.py").write_text(WORKFLOW)
    return "bench_fairness"


def _tenant_project(slug: str):
    from openrath_project.tenancy.services import project_create, tenant_create

    return project_create(tenant=tenant_create(slug=slug), slug="work")


def _submit(project) -> uuid.UUID:
    from runs_app import services
    from runs_app.registration import workflows

    run, _ = services.run_create(project=project, workflow=workflows().get("fair_one"), state={})
    return run.id


def _insert_backlog(project, count: int) -> float:
    """``count`` queued runs of ``project``, each with a working session of its own as
    ``run_create`` makes them, in one statement (copies of a real queued run and its session),
    created 1 ms apart and before now. Seconds taken."""
    from django.db import connection

    template = _submit(project)
    started = time.perf_counter()
    _copy_run(template, count, "now() - make_interval(secs => (%(n)s - ids.i + 1) / 1000.0)")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_app_run SET status = 'cancelled' WHERE id = %s", [template])
    _vacuum()
    return time.perf_counter() - started


def _copy_run(template: uuid.UUID, count: int, created_at: str) -> None:
    """``count`` copies of queued run ``template`` and of its working session (new ids; the
    copy's session belongs to the copy), ``created_at`` an SQL expression of ``ids.i``."""
    from django.db import connection

    from runs_app.models import Run
    from sessions_app.models import Session

    def columns(model, fresh: dict[str, str]) -> tuple[str, str]:
        names = [str(field.column) for field in model._meta.concrete_fields]
        values = [fresh.get(name, f'"{model._meta.db_table}"."{name}"') for name in names]
        return ", ".join(f'"{name}"' for name in names), ", ".join(values)

    session_columns, session_values = columns(
        Session,
        {"id": "ids.session", "run_id": "ids.run", "created_at": created_at},
    )
    run_columns, run_values = columns(
        Run,
        {
            "id": "ids.run",
            "session_id": "ids.session",
            "created_at": created_at,
            "updated_at": "now()",
            "idempotency_key": "NULL",
        },
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH ids AS (
                SELECT i, gen_random_uuid() AS run, gen_random_uuid() AS session
                FROM generate_series(1, %(n)s) AS i
            ), sessions AS (
                INSERT INTO sessions_app_session ({session_columns})
                SELECT {session_values} FROM sessions_app_session, ids
                WHERE sessions_app_session.id = (
                    SELECT session_id FROM runs_app_run WHERE id = %(template)s)
            )
            INSERT INTO runs_app_run ({run_columns})
            SELECT {run_values} FROM runs_app_run, ids WHERE runs_app_run.id = %(template)s
            """,  # noqa: S608 - column names from model metadata, values are parameters
            {"n": count, "template": template},
        )


def _vacuum() -> None:
    """What autovacuum does between a scenario's bulk changes and the next measurement: the
    dead index entries of rows that left the queue are not scanned again."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE runs_app_run")


def _finish(run_id: uuid.UUID) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_app_run SET status = 'succeeded', finished_at = now() WHERE id = %s",
            [run_id],
        )


def _requeue(run_id: uuid.UUID) -> None:
    """Back to the queue as it was (the backlog stays at its size through the rounds)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_app_run SET status = 'queued', lease_owner = '',"
            " lease_expires_at = NULL WHERE id = %s",
            [run_id],
        )


def _fair_claim() -> uuid.UUID | None:
    from runs_app.services import lease_claim

    claim = lease_claim(worker="bench-fair")
    return claim.run_id if claim is not None else None


def _old_claim() -> uuid.UUID | None:
    """The previous claim statement, executed as the fair one is (prepared, one round trip)."""
    from psycopg.types.numeric import Int8

    from runs_app.services import composed, leases
    from runs_app.services.eventlog import publish_event

    rows = composed.execute_composed(_old_sql(), {"worker": "bench-old", "lease": Int8(300)})
    if not rows:
        return None
    _, run_id, token, event_seq, length = rows[0][:5]
    publish_event(run_id, int(event_seq))  # as lease_claim does after a claim
    leases._claimed(rows[0], int(token), length)
    return run_id


def _wait_for(target: uuid.UUID, claim, cap: int, claim_times: list[float]) -> tuple[int, float]:
    """Claim (and finish) until ``target`` is claimed: (claims before it, seconds); (cap, s)
    when not claimed within ``cap`` claims."""
    began = time.perf_counter()
    for before in range(cap):
        started = time.perf_counter()
        got = claim()
        claim_times.append(time.perf_counter() - started)
        if got is None:
            raise RuntimeError("the queue ran dry before the target run was claimed")
        _finish(got)
        if got == target:
            return before, time.perf_counter() - began
    return cap, time.perf_counter() - began


def _old_position(target: uuid.UUID) -> int:
    """Queued runs the old order puts before ``target`` (counted, not claimed)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM runs_app_run AS q, runs_app_run AS t WHERE t.id = %s"
            " AND q.status = 'queued' AND q.id <> t.id AND (q.priority > t.priority OR"
            " (q.priority = t.priority AND q.created_at < t.created_at))",
            [target],
        )
        return int(cursor.fetchone()[0])


@functools.cache
def _old_sql() -> str:
    """Formatted once, as the fair statement is (``leases._claim_sql``)."""
    from runs_app.services import leases
    from sessions_app import append_sql

    return _OLD_CLAIM_SQL.format(
        writer=append_sql.claim_writer_cte("r"), rows=leases._claimed_rows_sql()
    )


def _fair_sql() -> str:
    from runs_app.services import leases

    return leases._claim_sql(one=False, skip=False, workflows=False, opaque=False)


def _claim_buffers(sql: str) -> dict[str, Any]:
    """Shared buffers (hit + read) and execution ms of one claim statement, rolled back."""
    from django.db import connection, transaction

    params = {"worker": "bench-explain", "lease": 300, "run": None, "skip": [], "workflows": []}
    result: dict[str, Any] = {}
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
            plan = plan[0] if isinstance(plan, list) else plan
            top = plan["Plan"]
            result = {
                "buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
                "ms": plan["Execution Time"],
            }
            raise _Rollback
    except _Rollback:
        pass
    return result


class _Rollback(Exception):
    pass


def _throughput(rounds: int, claims: int) -> dict[str, list[float]]:
    """Claims per second, fair and old, of ``rounds`` rounds on the current backlog; in a
    round the two alternate claim by claim, so the machine's load falls on both alike."""
    per_second: dict[str, list[float]] = {"fair": [], "old": []}
    times: dict[str, list[float]] = {"fair": [], "old": []}
    for _ in range(rounds):
        spent = {"fair": 0.0, "old": 0.0}
        for _ in range(claims):
            for order, claim in (("fair", _fair_claim), ("old", _old_claim)):
                started = time.perf_counter()
                got = claim()
                took = time.perf_counter() - started
                if got is None:
                    raise RuntimeError("the backlog ran dry")
                spent[order] += took
                times[order].append(took)
                _requeue(got)
        for order in per_second:
            per_second[order].append(claims / spent[order])
    return {**per_second, "fair_times": times["fair"], "old_times": times["old"]}


def _replace(project) -> None:
    """One more queued run of ``project`` (with its session), created now: the backlog keeps
    its size while runs are executed."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM runs_app_run WHERE project_id = %s AND status = 'queued' LIMIT 1",
            [project.id],
        )
        template = cursor.fetchone()[0]
    _copy_run(template, 1, "now()")


def _run_throughput(project, rounds: int, runs: int) -> dict[str, list[float]]:
    """Runs executed per second by one worker, with the fair claim and with the old one: each
    ``runs_app.executor.run_one`` claims a run, executes its step (a checkpoint commit) and
    finishes it, as a worker does; the old order by the old statement in place of the fair one
    (``leases._claim_sql``), everything else the same. The two alternate run by run, and each
    executed run is replaced by a new queued one, untimed."""
    from runs_app.executor import run_one
    from runs_app.registration import workflows
    from runs_app.services import leases

    fair_sql = leases._claim_sql

    def old_sql(**_kind: bool) -> str:
        return _old_sql()

    registry = workflows()
    per_second: dict[str, list[float]] = {"fair": [], "old": []}
    for _ in range(rounds):
        spent = {"fair": 0.0, "old": 0.0}
        for _ in range(runs):
            for order, sql in (("fair", fair_sql), ("old", old_sql)):
                leases._claim_sql = sql  # type: ignore[assignment]
                try:
                    started = time.perf_counter()
                    outcome = run_one(f"bench-{order}", registry=registry)
                    spent[order] += time.perf_counter() - started
                finally:
                    leases._claim_sql = fair_sql
                if outcome is None or outcome.status != "succeeded":
                    raise RuntimeError(f"a run did not succeed: {outcome}")
                _replace(project)
        for order in per_second:
            per_second[order].append(runs / spent[order])
    return per_second


def scenario(
    size: int, *, waits: int, rounds: int, claims: int, run_count: int, old_cap: int
) -> dict[str, Any]:
    from django.db import connection

    a = _tenant_project(f"a-{size}")
    b = _tenant_project(f"b-{size}")
    inserted = _insert_backlog(a, size)
    for _ in range(3):  # warm-up: prepared statements, caches
        _finish(_fair_claim())
    fair_waits, fair_ms, fair_claim_times = [], [], []
    for _ in range(waits):
        target = _submit(b)
        before, seconds = _wait_for(target, _fair_claim, size, fair_claim_times)
        fair_waits.append(before)
        fair_ms.append(seconds * 1000)
    buffers = [_claim_buffers(_fair_sql()) for _ in range(5)]
    old_buffers = [_claim_buffers(_old_sql()) for _ in range(5)]
    throughput = _throughput(rounds, claims)
    executed = _run_throughput(a, rounds, run_count)
    old_target = _submit(b)
    position = _old_position(old_target)
    old_before, old_seconds = _wait_for(old_target, _old_claim, min(old_cap, size + 1), [])
    pairs = list(zip(throughput["fair"], throughput["old"], strict=False))
    with connection.cursor() as cursor:  # leave nothing claimable for the next size
        cursor.execute(
            "UPDATE runs_app_run SET status = 'cancelled' WHERE status IN ('queued', 'running')"
            " AND tenant_id IN (%s, %s)",
            [a.tenant_id, b.tenant_id],
        )
    _vacuum()
    return {
        "size": size,
        "insert_s": inserted,
        "fair_waits": fair_waits,
        "fair_wait_ms": statistics.median(fair_ms),
        "fair_claim_ms": statistics.median(fair_claim_times) * 1000,
        "fair_claim_p90_ms": percentile(fair_claim_times, 0.9) * 1000,
        "old_position": position,
        "old_before": old_before,
        "old_claimed": old_before < min(old_cap, size + 1),
        "old_seconds": old_seconds,
        "buffers": statistics.median(b["buffers"] for b in buffers),
        "explain_ms": statistics.median(b["ms"] for b in buffers),
        "old_buffers": statistics.median(b["buffers"] for b in old_buffers),
        "old_explain_ms": statistics.median(b["ms"] for b in old_buffers),
        "fair_per_s": statistics.median(throughput["fair"]),
        "old_per_s": statistics.median(throughput["old"]),
        "fair_round_ms": statistics.median(throughput["fair_times"]) * 1000,
        "old_round_ms": statistics.median(throughput["old_times"]) * 1000,
        "ratio": statistics.median(fair / old for fair, old in pairs),
        "ratios": [fair / old for fair, old in pairs],
        "runs_fair_per_s": statistics.median(executed["fair"]),
        "runs_old_per_s": statistics.median(executed["old"]),
        "runs_ratio": statistics.median(
            fair / old for fair, old in zip(executed["fair"], executed["old"], strict=True)
        ),
        "runs_ratios": [
            fair / old for fair, old in zip(executed["fair"], executed["old"], strict=True)
        ],
    }


def render(results: list[dict[str, Any]], args: argparse.Namespace, load: tuple) -> str:
    lines = [
        f"One claimer; B submits one run {args.waits} times per size; throughput: "
        f"{args.rounds} rounds of {args.claims} fair + {args.claims} old claims, alternating; "
        f"runs executed: {args.rounds} rounds of {args.runs} + {args.runs} runs, alternating. "
        f"Load average (1 min) {load[0]:.1f} -> {load[1]:.1f}.",
        "",
        _header(results),
        "|---|" + "---:|" * len(results),
    ]
    rows = [
        ("B's run: claims before it, fair (each submission)", lambda r: _list(r["fair_waits"])),
        ("B's run: wait ms p50, fair", lambda r: f"{r['fair_wait_ms']:.1f}"),
        (
            "B's run: claims before it, old order (claimed up to the cap)",
            lambda r: f"{r['old_before']:,}" + ("" if r["old_claimed"] else " (not yet)"),
        ),
        (
            "B's run: queued runs before it in the old order (SQL count)",
            lambda r: f"{r['old_position']:,}",
        ),
        (
            "fair claim ms p50 / p90 (wait loops)",
            lambda r: f"{r['fair_claim_ms']:.2f} / {r['fair_claim_p90_ms']:.2f}",
        ),
        (
            "claim statement, fair: shared buffers, execution ms (EXPLAIN ANALYZE)",
            lambda r: f"{r['buffers']:.0f}, {r['explain_ms']:.2f}",
        ),
        (
            "claim statement, old: shared buffers, execution ms (EXPLAIN ANALYZE)",
            lambda r: f"{r['old_buffers']:.0f}, {r['old_explain_ms']:.2f}",
        ),
        (
            "claim ms p50, fair / old (throughput rounds)",
            lambda r: f"{r['fair_round_ms']:.2f} / {r['old_round_ms']:.2f}",
        ),
        ("claims/s median, fair / old", lambda r: f"{r['fair_per_s']:.0f} / {r['old_per_s']:.0f}"),
        (
            "claim-only throughput ratio fair / old (median of rounds)",
            lambda r: f"**{r['ratio']:.2f}** ({_list(r['ratios'], '.2f')})",
        ),
        (
            "runs executed/s median (claim, step, finish), fair / old",
            lambda r: f"{r['runs_fair_per_s']:.0f} / {r['runs_old_per_s']:.0f}",
        ),
        (
            "**run throughput ratio fair / old** (median of rounds)",
            lambda r: f"**{r['runs_ratio']:.2f}** ({_list(r['runs_ratios'], '.2f')})",
        ),
        ("backlog insert, s", lambda r: f"{r['insert_s']:.2f}"),
    ]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(r) for r in results) + " |")
    return "\n".join(lines)


def _header(results: list[dict[str, Any]]) -> str:
    return "| A's queued runs | " + " | ".join(f"{r['size']:,}" for r in results) + " |"


def _list(values: list[Any], spec: str = "") -> str:
    return ", ".join(format(v, spec) for v in values)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--waits", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--claims", type=int, default=150)
    parser.add_argument("--runs", type=int, default=100, help="executed runs per order a round")
    parser.add_argument("--old-cap", type=int, default=2000, help="old-order claims at most")
    parser.add_argument("--database", default="openrath_bench_fairness", help="dropped, made anew")
    parser.add_argument("--server", default="postgres://root@127.0.0.1:5432")
    parser.add_argument("--write", action="store_true", help="write benchmarks/RESULTS.md")
    args = parser.parse_args()
    module_dir = Path(tempfile.mkdtemp(prefix="openrath-bench-fairness-"))
    sys.path.insert(0, str(module_dir))
    os.environ["OPENRATH_WORKFLOW_MODULES"] = workflow_module(module_dir)
    os.environ["OPENRATH_DISPATCH"] = "none"
    setup_django(fresh_postgres(args.database, args.server))
    sizes = [int(size) for size in args.sizes.split(",")]
    load_before = os.getloadavg()[0]
    results = [
        scenario(
            size,
            waits=args.waits,
            rounds=args.rounds,
            claims=args.claims,
            run_count=args.runs,
            old_cap=args.old_cap,
        )
        for size in sizes
    ]
    load_after = os.getloadavg()[0]
    body = render(results, args, (load_before, load_after))
    print(body)
    if args.write:
        command = "python benchmarks/fairness.py " + " ".join(sys.argv[1:])
        write_section(
            "fairness",
            "Tenant-fair claims (issue 23 item 3)",
            body + "\n\n" + NOTES,
            command.strip(),
        )


NOTES = """\
How: tenant A's backlog is inserted with one `INSERT ... SELECT generate_series` (copies of a
real queued run and its working session, 1 ms apart, all older than B's); B submits through
`services.run_create`; one claimer claims with `lease_claim` (the fair statement, with its
session writer and returned rows) or with the previous statement (priority, then age), and
finishes each claimed run with an untimed `UPDATE`. Run throughput: one worker's
`runs_app.executor.run_one` (claim, the run's one step, its finish) with either statement,
alternating run by run. "Old order" rows are the same process on the same backlog. The claim
order: tenants by fewest running runs, then longest since served (`Tenant.last_claimed_at`),
then the tenant's own priority, projects likewise, then age (docs/operations.md, "Fair queues
and limits")."""


if __name__ == "__main__":
    main()
