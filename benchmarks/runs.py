"""Durable-run benchmark on PostgreSQL (issue 6): W1 step overhead, W2 throughput, W3 growth.

    python benchmarks/runs.py              # full run; rewrites its section of RESULTS.md
    python benchmarks/runs.py --quick      # fewer workflows, prints only

In the same run it measures a floor: raw psycopg ``INSERT`` of a step's delta + ``COMMIT``.

* W1: 100 workflows x 20 steps, one process, in two variants: each step appends one ~200-byte
  message as a session chunk, or to the state's list of messages (issue 20); per-step p50/p99
  (consecutive checkpoints' commit times). Target (issue 20): p50 <= 2x the floor for both.
* W2: 200 workflows x 20 steps executed by 1 and then 2 worker processes
  (``manage.py run_worker``): durable steps/s. Target: 2 workers >= 1.6x one.
* W3: one workflow of 200 steps each appending a 500-byte chunk: WAL bytes written per step,
  steps 1-10 vs 191-200 (medians: the WAL position is cluster-wide). Target: ratio <= 1.2.
  Also its table bytes (issue 20's measure), every relation's growth against the chunks'
  content, twice: a run of it first, on fresh tables (which pays the first page of every
  relation it touches), and in steady state, runs of it on tables that already hold earlier ones
  (what a deployment pays per run). Target: <= 3. ``--w3-bytes`` runs just these.
* W3m (issue 20): the peer-shaped workload, one workflow of 200 (then 2,000) steps each doing
  ``state["messages"] = state["messages"] + [a 500-byte message]`` (messages in the state, no
  session chunk): checkpoint table bytes (with TOAST and indexes) / logical bytes (the messages'
  JSON), and step time, median of the last ten / the first ten. Targets: <= 3 and <= 1.2.
  ``--messages-only`` runs just this workload.
* W1 through ``flow.LocalRuntime`` (issue 17), ``--local-runtime``: the same 20-step runs
  submitted with ``LocalRuntime.submit`` and executed with ``work_once``, in blocks alternated
  with the worker path (``run_one``): per-step p50/p99 of both, and the database round trips of
  both, counted at the libpq boundary in a child process (``PSYCOPG_IMPL=python``, every request
  the client library sends: statements, BEGIN/COMMIT, prepares; the composed claim and step
  commit bypass Django's cursor, so ``execute_wrapper`` would miss them). Per step is the
  difference between 200-step and 20-step runs over 180 steps. Target: no extra round trip per
  step. Rewrites its own section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    REPO,
    ROUND_TRIP_METHODS,
    fresh_postgres,
    median_ms,
    p99_ms,
    setup_django,
    write_section,
)

STEPS = 20
W3_STEPS = 200
W3M_STEPS = (200, 2000)
W2_ROUNDS = 5  # alternated batch pairs; the ratio's spread over 3 pairs was 1.54-1.75
#: W3's steady-state table bytes: runs of ``bench200`` after the fresh-tables one, before the
#: measured ones (so the last pages of every relation hold rows), then runs measured together
#: (a relation grows by whole 8 KiB pages: one run alone rounds by up to 8 KiB a relation).
W3_WARMUP_RUNS = 2
W3_STEADY_RUNS = 3


def workflow_module(directory: Path) -> str:
    """Write the benchmark workflows as a module (20, 200 and W3m's distinct steps)."""

    def steps(name: str, count: int, size: int) -> str:
        body = []
        for i in range(1, count + 1):
            successors = f'("s{i + 1}",)' if i < count else "()"
            entry = "entry=True, " if i == 1 else ""
            body.append(
                textwrap.dedent(f"""
                @flow.step({entry}successors={successors}, effects="none")
                def s{i}(self, state, ctx):
                    ctx.session.append(PAYLOAD_{size}, role="assistant")
                    return {{**state, "n": {i}}}
            """)
            )
        methods = textwrap.indent("".join(body), "    ")
        return f"\n\nclass Bench{count}(flow.Workflow):\n    name = {name!r}\n{methods}"

    def state_steps(name: str, count: int, size: int) -> str:
        """W1's other variant (issue 20): each step appends the message to the state's list
        instead of the session, ``state["messages"] = state["messages"] + [message]``."""
        body = []
        for i in range(1, count + 1):
            successors = f'("s{i + 1}",)' if i < count else "()"
            entry = "entry=True, " if i == 1 else ""
            body.append(
                textwrap.dedent(f"""
                @flow.step({entry}successors={successors}, effects="none")
                def s{i}(self, state, ctx):
                    message = {{"role": "assistant", "content": PAYLOAD_{size}}}
                    state["messages"] = state.get("messages", []) + [message]
                    return state
            """)
            )
        methods = textwrap.indent("".join(body), "    ")
        return f"\n\nclass Bench{count}M(flow.Workflow):\n    name = {name!r}\n{methods}"

    source = "from openrath_project import flow\n\n"
    source += 'PAYLOAD_200 = "x" * 200\nPAYLOAD_500 = "y" * 500\n'
    source += steps("bench20", STEPS, 200) + steps("bench200", W3_STEPS, 500)
    source += state_steps("bench20m", STEPS, 200)
    source += MESSAGE_HELPER + "".join(messages_steps(count) for count in W3M_STEPS)
    (directory / "bench_workflows.py").write_text(source)
    return "bench_workflows"


MESSAGE_BYTES = 500
MESSAGE_HELPER = textwrap.dedent(f"""

    import hashlib


    def message(i):
        # Distinct hex content (barely compressible): no help from TOAST compression.
        text, seed = f"m{{i}}:", str(i)
        while len(text) < {MESSAGE_BYTES - 33}:
            seed = hashlib.sha256(seed.encode()).hexdigest()
            text += seed
        return {{"role": "assistant", "content": text[:{MESSAGE_BYTES - 33}]}}
""")


def messages_steps(count: int) -> str:
    """A workflow ``benchmessages<count>`` of ``count`` steps, each appending a distinct
    500-byte message (canonical JSON) to ``state["messages"]``, as peers' workflows do."""
    body = []
    for i in range(1, count + 1):
        successors = f'("m{i + 1}",)' if i < count else "()"
        entry = "entry=True, " if i == 1 else ""
        body.append(
            textwrap.dedent(f"""
            @flow.step({entry}successors={successors}, effects="none")
            def m{i}(self, state, ctx):
                state["messages"] = state["messages"] + [message({i})]
                return state
        """)
        )
    methods = textwrap.indent("".join(body), "    ")
    name = f"benchmessages{count}"
    return f"\n\nclass BenchMessages{count}(flow.Workflow):\n    name = {name!r}\n{methods}"


def messages_workload(project, registry, count: int) -> dict[str, float]:
    """Run ``benchmessages<count>`` alone; its checkpoint-table and artifact-store growth
    against the logical bytes, and its step times (intervals between checkpoints)."""
    from django.conf import settings
    from django.db import connection

    from openrath_project import large_values
    from openrath_project.jsontext import canonical
    from runs_app import services
    from runs_app.executor import run_one
    from runs_app.models import Checkpoint

    location = settings.STORAGES["default"].get("OPTIONS", {}).get("location")

    def sizes() -> tuple[int, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_total_relation_size(%s)", [Checkpoint._meta.db_table])
            table = int(cursor.fetchone()[0])
        if not location:  # not a local directory (S3): not measured
            return table, -1
        return table, sum(f.stat().st_size for f in Path(location).rglob("*") if f.is_file())

    table_before, artifacts_before = sizes()
    run = services.run_create(
        project=project, workflow=registry.get(f"benchmessages{count}"), state={"messages": []}
    )[0]
    started = time.perf_counter()
    while run_one("bench-w3m", registry=registry) is not None:
        pass
    elapsed = time.perf_counter() - started
    run.refresh_from_db()
    assert run.status == "succeeded", run.status
    table_after, artifacts_after = sizes()
    # The state as steps see it: large values read back from the artifact store.
    messages = large_values.hydrate(run.tenant_id, services.run_state_at(run))["messages"]
    assert len(messages) == count
    logical = sum(len(canonical(m).encode()) for m in messages)
    intervals = step_latencies([run.id])
    rows = Checkpoint.objects.filter(run=run)
    return {
        "steps": count,
        "seconds": elapsed,
        "logical": logical,
        "table": table_after - table_before,
        "artifacts": artifacts_after - artifacts_before if location else -1,
        "keyframes": rows.filter(full=True).count(),
        "early_ms": statistics.median(intervals[:10]) * 1000,
        "late_ms": statistics.median(intervals[-10:]) * 1000,
    }


def relation_bytes() -> dict[str, int]:
    """``pg_relation_size`` of every table, index and TOAST table of the product's schema."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname IN ('public', 'pg_toast') AND c.relkind IN ('r', 'i', 't')"
        )
        return {name: int(size) for name, size in cursor.fetchall()}


def updates_of(tables: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """``(n_tup_upd, n_tup_hot_upd)`` of ``tables``, this backend's own counts flushed first."""
    from django.db import connection

    with connection.cursor() as cursor:
        # The statistics of a backend reach the shared counters when it goes idle, at most once
        # a second: ask for the next flush, end a transaction so it happens, read afresh.
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT 1")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE relname = ANY(%s)",
            [list(tables)],
        )
        return {name: (int(upd), int(hot)) for name, upd, hot in cursor.fetchall()}


class HorizonWatch:
    """While open, who else on the cluster holds a transaction id for longer than ``HELD``.

    Such a transaction, in any database of the cluster, is in every snapshot the benchmark takes
    meanwhile, so the snapshots' xmin keeps PostgreSQL from pruning the row versions that the
    run's steps leave behind (the run and session rows, updated every step). A thread polls
    ``pg_stat_activity`` from the ``postgres`` database: a backend of another database does not
    hold back this database's horizon itself."""

    HELD = 0.05  # seconds; a step's own transaction lasts about a millisecond
    POLL = 0.02

    def __init__(self, server: str) -> None:
        self.server = server
        self.held: dict[str, float] = {}  # database -> longest transaction seen, seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> HorizonWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        import psycopg

        with psycopg.connect(f"{self.server}/postgres", autocommit=True) as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT datname, extract(epoch FROM now() - xact_start) "
                    "FROM pg_stat_activity WHERE backend_xid IS NOT NULL "
                    "AND pid <> pg_backend_pid() AND now() - xact_start > %s * interval '1 s'",
                    [self.HELD],
                ).fetchall()
                for database, seconds in rows:
                    name = database or "(none)"
                    self.held[name] = max(self.held.get(name, 0.0), float(seconds))
                self._stop.wait(self.POLL)


def w3_bytes_runs(project, registry, runs: int, server: str) -> dict[str, Any]:
    """``runs`` runs of ``bench200`` one after the other: every relation's growth over them, the
    updates of the run and session rows (how many were HOT) with their tables' growth, and the
    other transactions that held the horizon meanwhile (:class:`HorizonWatch`)."""
    from runs_app.executor import run_one
    from runs_app.models import Run
    from sessions_app.models import Session

    watched = (Run._meta.db_table, Session._meta.db_table)
    relations_before, updates_before = relation_bytes(), updates_of(watched)
    ids = create_runs(project, registry.get("bench200"), runs)
    with HorizonWatch(server) as horizon:
        while run_one("bench-w3-bytes", registry=registry) is not None:
            pass
    assert Run.objects.filter(id__in=ids, status="succeeded").count() == runs
    relations_after, updates_after = relation_bytes(), updates_of(watched)
    grown = {name: size - relations_before.get(name, 0) for name, size in relations_after.items()}
    updates = {
        table: (
            updates_after[table][0] - updates_before.get(table, (0, 0))[0],
            updates_after[table][1] - updates_before.get(table, (0, 0))[1],
            grown.get(table, 0),
        )
        for table in watched
    }
    return {"runs": runs, "grown": grown, "updates": updates, "held": horizon.held}


def w3_table_bytes(fresh: dict[str, Any], steady: dict[str, Any], logical: int) -> str:
    """W3's table bytes (the session-chunk variant of issue 20's measure): what every relation
    grew by, against the chunks' content, on fresh tables and in steady state, with the chunk
    table's own share and what the run and session rows' updates cost."""
    from sessions_app.models import Chunk

    chunk_table = Chunk._meta.db_table
    chunk_rels = {chunk_table, *(index.name for index in Chunk._meta.indexes)}
    chunk_rels |= {c.name for c in Chunk._meta.constraints}

    def figures(measured: dict[str, Any]) -> tuple[float, float, str, str]:
        grown, runs = measured["grown"], measured["runs"]
        chunks = sum(
            size
            for name, size in grown.items()
            if name in chunk_rels or name.startswith(f"{chunk_table}_")
        )
        biggest = sorted(grown.items(), key=lambda item: -item[1])[:6]
        largest = ", ".join(f"`{name}` {size // runs:,}" for name, size in biggest)
        rows = "; ".join(
            f"`{table}` {upd / runs:.0f} updates a run, {hot / max(upd, 1):.0%} HOT, "
            f"table +{size // runs:,}"
            for table, (upd, hot, size) in measured["updates"].items()
        )
        held = measured["held"]
        rows += ", " + (
            "other transactions holding an xid meanwhile: "
            + ", ".join(f"`{db}` up to {seconds:.1f} s" for db, seconds in sorted(held.items()))
            if held
            else f"no other transaction held an xid over {HorizonWatch.HELD * 1000:.0f} ms"
        )
        total = sum(grown.values()) / (runs * logical)
        return total, chunks / (runs * logical), largest, rows

    fresh_total, fresh_chunks, fresh_largest, fresh_rows = figures(fresh)
    steady_total, steady_chunks, steady_largest, steady_rows = figures(steady)
    return (
        f"Table bytes of W3: growth of every table, index and TOAST table of the schema / logical "
        f"bytes (the chunks' 500-byte contents, {logical:,} a run). **Fresh tables** (one run of "
        f"`bench200` before the other workloads, on an empty schema: it pays the first page of "
        f"every relation it touches, and the plan's first storage): **{fresh_total:.2f}** (target "
        f"<= 3); the chunk table and its indexes {fresh_chunks:.2f}. **Steady state** (the "
        f"mean of {steady['runs']} runs measured together, after {W3_WARMUP_RUNS} more on the "
        f"same tables: what a deployment pays per run): **{steady_total:.2f}**; the chunk table "
        f"and its indexes {steady_chunks:.2f}. Largest (bytes a run), fresh: {fresh_largest}; "
        f"steady: {steady_largest}. The run and session rows, updated every step, fresh: "
        f"{fresh_rows}. Steady: {steady_rows}. Their old versions are pruned during the run "
        f"(the tables grow by a page at most) unless a transaction anywhere on the cluster that "
        f"holds an xid keeps the horizon back (it is in every snapshot's xmin): then each step "
        f"leaves a version of both rows (measured: +1.4 x logical in steady state).\n"
    )


#: Runs of each W3m workload: its step-time ratio is the median of theirs (a step is well under
#: a millisecond, so ten of them are at the mercy of one scheduling hiccup).
W3M_REPEATS = 5


def messages_section(project, registry) -> str:
    """W3m's table: each of ``W3M_STEPS`` run ``W3M_REPEATS`` times, one after the other; the
    row is the run with the median step-time ratio, the others' ratios beside it."""
    lines = [
        "### W3m: messages kept in the state (one workflow, 500-byte messages, issue 20)\n",
        "| steps | run s | logical bytes | checkpoint table bytes | table / logical | "
        "artifact bytes | keyframes | step ms, first ten | last ten | last / first "
        f"(median of {W3M_REPEATS} runs) | each run's last / first |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for count in W3M_STEPS:
        runs = [messages_workload(project, registry, count) for _ in range(W3M_REPEATS)]
        # Bytes from the first run: the later ones find their blocks stored already (content
        # addressed), so they write no artifact bytes.
        b = runs[0]
        each = ", ".join(f"{m['late_ms'] / m['early_ms']:.2f}" for m in runs)
        runs.sort(key=lambda m: m["late_ms"] / m["early_ms"])
        r = runs[len(runs) // 2]
        artifacts = f"{b['artifacts']:,}" if b["artifacts"] >= 0 else "n/a (S3)"
        lines.append(
            f"| {count:,} | {b['seconds']:.1f} | {b['logical']:,} | {b['table']:,} | "
            f"**{b['table'] / b['logical']:.2f}** | {artifacts} | {b['keyframes']} | "
            f"{r['early_ms']:.2f} | {r['late_ms']:.2f} | **{r['late_ms'] / r['early_ms']:.2f}** "
            f"| {each} |"
        )
    lines.append(
        '\nEach step does `state["messages"] = state["messages"] + [message]`. Table bytes: '
        "growth of `pg_total_relation_size` of the checkpoint table (heap, TOAST, indexes) over "
        "the run; logical bytes: the messages' canonical JSON; artifact bytes: growth of the "
        "artifact store (large state values offloaded by `large_values`). Step ms: medians of "
        "the intervals between consecutive checkpoints, steps 2-11 and the last ten, of the run "
        f"with the median ratio of {W3M_REPEATS} (bytes and run time: the first run). Targets: "
        "table / logical <= 3, last / first <= 1.2.\n"
    )
    return "\n".join(lines)


def floor(url: str, runs: int, steps: int) -> list[float]:
    """Raw psycopg: INSERT the step's delta, COMMIT; one persistent connection."""
    import psycopg

    samples = []
    with psycopg.connect(url) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS floor_steps (run uuid, seq int, delta jsonb, "
            "PRIMARY KEY (run, seq))"
        )
        conn.commit()
        for _ in range(runs):
            run = uuid.uuid4()
            for seq in range(1, steps + 1):
                started = time.perf_counter()
                conn.execute(
                    "INSERT INTO floor_steps VALUES (%s, %s, %s)",
                    (run, seq, json.dumps({"set": {"n": seq}})),
                )
                conn.commit()
                samples.append(time.perf_counter() - started)
    return samples


def create_runs(project, registered, count: int) -> list:
    from runs_app import services

    return [
        services.run_create(project=project, workflow=registered, state={})[0].id
        for _ in range(count)
    ]


def step_latencies(run_ids) -> list[float]:
    from runs_app.models import Checkpoint

    samples = []
    for run_id in run_ids:
        times = list(
            Checkpoint.objects.filter(run_id=run_id)
            .order_by("seq")
            .values_list("created_at", flat=True)
        )
        samples += [(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)]
    return samples


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def run_workers(env: dict[str, str], workers: int, expected_runs: int) -> float:
    """Start ``workers`` run_worker processes; seconds from start to the last run's end."""
    from runs_app.models import Run

    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "run_worker",
                "--poll",
                "0.05",
                "--idle-exit",
                "2",
                "--name",
                f"bench-{i}",
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(workers)
    ]
    try:
        while Run.objects.filter(status="succeeded").count() < expected_runs:
            if time.perf_counter() - started > 1800:
                raise RuntimeError("W2 did not finish within 30 minutes")
            time.sleep(0.2)
        elapsed = time.perf_counter() - started
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
    return elapsed


def bench_context():
    """The LocalRuntime's context: the benchmark's tenant and project (``bench``/``bench``)."""
    from openrath_project.context import RunContext
    from openrath_project.security import Principal, PrincipalKind, SecurityContext

    principal = Principal(id="bench", kind=PrincipalKind.SERVICE)
    return RunContext(
        security=SecurityContext(principal=principal, tenant_id="bench"), project="bench"
    )


def local_runtime(module: str):
    """A ``flow.LocalRuntime`` with the benchmark's 20- and 200-step workflows registered as
    instances, as an OpenRath script does."""
    import importlib

    from openrath_project import flow

    workflows = importlib.import_module(module)
    runtime = flow.LocalRuntime()
    bench20, bench200 = workflows.Bench20(), workflows.Bench200()
    runtime.register(bench20)
    runtime.register(bench200)
    return runtime, {"bench20": bench20, "bench200": bench200}


def count_round_trips(module: str, runs: int) -> dict:
    """In a child with ``PSYCOPG_IMPL=python``: the round trips of submitting and of executing
    ``runs`` runs of 20 and of 200 steps down each path. One warm-up run per path and workflow
    first (connection set-up, prepared statements)."""
    import psycopg.pq

    from openrath_project.tenancy.models import Project
    from runs_app.executor import run_one
    from runs_app.registration import workflows

    assert psycopg.pq.__impl__ == "python", "run with PSYCOPG_IMPL=python"
    counter = {"n": 0}
    pgconn = psycopg.pq.PGconn
    for name in ROUND_TRIP_METHODS:
        original = getattr(pgconn, name)

        def counted(self, *args, _original=original, **kwargs):
            counter["n"] += 1
            return _original(self, *args, **kwargs)

        setattr(pgconn, name, counted)

    project = Project.objects.get(slug="bench")
    registry = workflows()
    runtime, instances = local_runtime(module)
    context = bench_context()

    def worker_submit(name):
        return create_runs(project, registry.get(name), 1)[0]

    def worker_execute():
        while run_one("bench-count", registry=registry) is not None:
            pass

    def local_submit(name):
        return runtime.submit(instances[name], context=context, state={}).id

    def local_execute():
        while runtime.work_once(worker_id="bench-count-local") is not None:
            pass

    paths = {"worker": (worker_submit, worker_execute), "local": (local_submit, local_execute)}
    result: dict = {}
    for path, (submit, execute) in paths.items():
        for name in ("bench20", "bench200"):
            submit(name)
            execute()  # warm-up
            counter["n"] = 0
            for _ in range(runs):
                submit(name)
            submitted = counter["n"]
            counter["n"] = 0
            execute()
            result.setdefault(path, {})[name] = {
                "runs": runs,
                "submit": submitted / runs,
                "execute": counter["n"] / runs,
            }
    return result


def local_runtime_section(project, registry, module: str, module_dir: Path, url: str, runs: int):
    """W1 down both paths, alternated in blocks, and the round trips counted in a child."""
    from runs_app.executor import run_one
    from runs_app.models import Run

    runtime, instances = local_runtime(module)
    context = bench_context()
    load_before = os.getloadavg()[0]
    ids: dict[str, list] = {"worker": [], "local": []}
    spent = {"worker": 0.0, "local": 0.0}
    for block in range(10):  # alternated, and which path goes first alternates too
        for path in ("worker", "local") if block % 2 == 0 else ("local", "worker"):
            if path == "worker":
                batch = create_runs(project, registry.get("bench20"), runs // 10)
                started = time.perf_counter()
                while run_one("bench-w1", registry=registry) is not None:
                    pass
            else:
                batch = [
                    runtime.submit(instances["bench20"], context=context, state={}).id
                    for _ in range(runs // 10)
                ]
                started = time.perf_counter()
                while runtime.work_once(worker_id="bench-w1-local") is not None:
                    pass
            spent[path] += time.perf_counter() - started
            ids[path] += batch
    for path, run_ids in ids.items():
        assert Run.objects.filter(id__in=run_ids, status="succeeded").count() == len(run_ids), path
    latency = {path: step_latencies(run_ids) for path, run_ids in ids.items()}
    load_after = os.getloadavg()[0]

    counted_runs = 5
    child = subprocess.run(
        [sys.executable, __file__, "--count-round-trips", url, "--runs", str(counted_runs)],
        env={
            **os.environ,
            "PSYCOPG_IMPL": "python",
            "PYTHONPATH": f"{REPO}{os.pathsep}{module_dir}",
        },
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if child.returncode != 0:
        raise RuntimeError(f"round-trip count failed:\n{child.stderr}")
    trips = json.loads(child.stdout.strip().splitlines()[-1])

    def per_step(path: str) -> float:
        long, short = trips[path]["bench200"]["execute"], trips[path]["bench20"]["execute"]
        return (long - short) / (W3_STEPS - STEPS)

    def fixed(path: str) -> float:
        return trips[path]["bench20"]["execute"] - STEPS * per_step(path)

    ratio = median_ms(latency["local"]) / median_ms(latency["worker"])
    labels = {"worker": "worker path (`run_one`)", "local": "`flow.LocalRuntime` (`work_once`)"}
    lines = [
        f"### W1 through flow.LocalRuntime ({len(ids['local'])} workflows x {STEPS} steps "
        "per path, one process)\n",
        "| path | step p50 ms | step p99 ms | whole runs, ms per step | round trips per step | "
        "per run besides steps: execute | submit |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for path in ("worker", "local"):
        lines.append(
            f"| {labels[path]} | {median_ms(latency[path]):.3f} | {p99_ms(latency[path]):.3f} | "
            f"{spent[path] / (len(ids[path]) * STEPS) * 1000:.3f} | {per_step(path):.2f} | "
            f"{fixed(path):.2f} | {trips[path]['bench20']['submit']:.2f} |"
        )
    lines.append(
        f"\nRound trips per step, LocalRuntime minus worker path: "
        f"**{per_step('local') - per_step('worker'):+.2f}** (target: 0). Step latency ratio "
        f"p50 LocalRuntime / worker path: **{ratio:.2f}**. "
        "Step times are the intervals between a run's consecutive checkpoints (database "
        "clock), from 10 alternated blocks; round trips are every libpq request of "
        f"{counted_runs} runs of {STEPS} and of {W3_STEPS} steps per path, after a warm-up "
        "run (child process, pure-Python libpq binding: counts only, no timings taken there). "
        "Per step = (200-step run - 20-step run) / 180: one round trip, the step's composed "
        "commit (the last one also finishes the run). Per run besides the steps, both paths: "
        "the claim, reading the run and its session, and the empty claim that ends the loop "
        "(counted once, spread over the runs); the worker path adds Django's connection "
        "health check (`close_old_connections` before each claim), `work_once` two reads of "
        "the run (is a retry due; the `Run` it returns). Submission: `services.run_create` "
        "called directly versus `LocalRuntime.submit`, which also looks the project up and "
        "reads the stored run back to return it. 1-minute load average when the timed blocks "
        f"started / ended: {load_before:.1f} / {load_after:.1f} on {os.cpu_count()} cores.\n"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--server", default="postgres://root@127.0.0.1:5432")
    parser.add_argument("--messages-only", action="store_true", help="run W3m only, print it")
    parser.add_argument(
        "--w3-bytes", action="store_true", help="run W3's table bytes only, print them"
    )
    parser.add_argument("--database", default="openrath_bench_runs", help="dropped and made anew")
    parser.add_argument(
        "--local-runtime",
        action="store_true",
        help="W1 through flow.LocalRuntime next to the worker path (round trips and latency)",
    )
    parser.add_argument("--count-round-trips", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count_round_trips:  # the child of --local-runtime, on its database
        setup_django(args.count_round_trips)
        print(json.dumps(count_round_trips(os.environ["OPENRATH_WORKFLOW_MODULES"], args.runs)))
        return
    module_dir = Path(tempfile.mkdtemp(prefix="openrath-bench-wf-"))
    module = workflow_module(module_dir)
    sys.path.insert(0, str(module_dir))
    os.environ["OPENRATH_WORKFLOW_MODULES"] = module
    os.environ["OPENRATH_DISPATCH"] = "none"
    url = fresh_postgres(args.database, args.server)
    setup_django(url)

    from django.db import connection

    from openrath_project.tenancy.services import project_create, tenant_create
    from runs_app import services
    from runs_app.executor import run_one
    from runs_app.models import Run
    from runs_app.registration import workflows

    tenant = tenant_create(slug="bench")
    project = project_create(tenant=tenant, slug="bench")
    registry = workflows()
    if args.messages_only:
        print(messages_section(project, registry))
        return
    if args.local_runtime:
        body = local_runtime_section(
            project, registry, module, module_dir, url, 20 if args.quick else 100
        )
        print(body)
        if not args.quick:
            write_section(
                "runs-local",
                "W1 through flow.LocalRuntime (PostgreSQL)",
                body,
                f"python benchmarks/runs.py --local-runtime --database {args.database}",
            )
        return
    w1_runs = 20 if args.quick else 100
    w2_runs = 40 if args.quick else 200

    # --- W3's table bytes, first, on tables no earlier workload left free space in ----------
    w3_fresh = w3_bytes_runs(project, registry, 1, args.server)
    w3_bytes_runs(project, registry, W3_WARMUP_RUNS, args.server)
    w3_steady = w3_bytes_runs(project, registry, W3_STEADY_RUNS, args.server)
    if args.w3_bytes:
        print(w3_table_bytes(w3_fresh, w3_steady, W3_STEPS * 500))
        return

    # --- floor and W1, interleaved in blocks so noise hits both alike -------------------
    # The two variants of issue 20: the message appended to the session (a chunk) or to the
    # state's list of messages; each block runs the floor, then each variant's runs alone.
    floor_samples: list[float] = []
    w1_ids: dict[str, list] = {"bench20": [], "bench20m": []}
    w1_time = {"bench20": 0.0, "bench20m": 0.0}
    for _ in range(5):
        floor_samples += floor(url, w1_runs // 5, STEPS)
        for name in w1_ids:
            ids = create_runs(project, registry.get(name), w1_runs // 5)
            block = time.perf_counter()
            while run_one("bench-w1", registry=registry) is not None:
                pass
            w1_time[name] += time.perf_counter() - block
            w1_ids[name] += ids
    for ids in w1_ids.values():
        assert Run.objects.filter(id__in=ids, status="succeeded").count() == len(ids)
    w1 = step_latencies(w1_ids["bench20"])
    w1m = step_latencies(w1_ids["bench20m"])
    floor_p50 = median_ms(floor_samples)

    def whole(name: str) -> str:
        return f"{w1_time[name] / (len(w1_ids[name]) * STEPS) * 1000:.3f}"

    lines = [
        "### W1: per-step overhead (100 workflows x 20 steps, one process)\n",
        "| | p50 ms | p99 ms | p50 / floor | whole runs incl. claim and finish, ms a step |",
        "|---|---:|---:|---:|---:|",
        f"| floor: raw psycopg INSERT + COMMIT | {floor_p50:.3f} | "
        f"{p99_ms(floor_samples):.3f} | 1 | |",
        f"| durable step, message as a session chunk (append a 200-byte chunk + checkpoint) | "
        f"{median_ms(w1):.3f} | {p99_ms(w1):.3f} | **{median_ms(w1) / floor_p50:.2f}** | "
        f"{whole('bench20')} |",
        f'| durable step, message in the state (`state["messages"] + [200-byte message]`'
        f" + checkpoint) | {median_ms(w1m):.3f} | {p99_ms(w1m):.3f} | "
        f"**{median_ms(w1m) / floor_p50:.2f}** | {whole('bench20m')} |",
        "\nTarget (issue 20): p50 <= 2x the floor for both variants. Step times are the intervals"
        " between a run's consecutive checkpoint commits.\n",
    ]

    # --- W2: throughput with 1 and 2 worker processes --------------------------------------
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{module_dir}",
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "LOG_LEVEL": "WARNING",
    }
    samples: dict[int, list[float]] = {1: [], 2: []}
    busy_samples: dict[int, list[float]] = {1: [], 2: []}
    worker_cpu: dict[int, list[float]] = {1: [], 2: []}  # ms of worker CPU per step
    from django.db.models import Max, Min

    for workers in (1, 2) * (1 if args.quick else W2_ROUNDS):  # alternated: noise hits both
        before = Run.objects.filter(status="succeeded").count()
        batch = create_runs(project, registry.get("bench20"), w2_runs)
        cpu_before = cpu_times()
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        run_workers(env, workers, before + w2_runs)
        children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_after = cpu_times()
        worker_seconds = (children_after.ru_utime + children_after.ru_stime) - (
            children_before.ru_utime + children_before.ru_stime
        )
        worker_cpu[workers].append(worker_seconds * 1000 / (w2_runs * STEPS))
        # From the first claim to the last finish: process start-up is not throughput.
        span = Run.objects.filter(id__in=batch).aggregate(a=Min("started_at"), b=Max("finished_at"))
        samples[workers].append(w2_runs * STEPS / (span["b"] - span["a"]).total_seconds())
        busy_samples[workers].append(
            (cpu_after[0] - cpu_before[0]) / max(1, cpu_after[1] - cpu_before[1])
        )
    rates = {w: statistics.median(v) for w, v in samples.items()}
    busy = {w: statistics.median(v) for w, v in busy_samples.items()}
    per_step_cpu = {w: statistics.median(v) for w, v in worker_cpu.items()}
    lines += [
        "### W2: throughput (200 workflows x 20 steps per batch, worker processes)\n",
        "| worker processes | durable steps/s | machine CPU busy | worker CPU per step, ms |",
        "|---:|---:|---:|---:|",
        f"| 1 | {rates[1]:,.0f} | {busy[1]:.0%} | {per_step_cpu[1]:.3f} |",
        f"| 2 | {rates[2]:,.0f} | {busy[2]:.0%} | {per_step_cpu[2]:.3f} |",
        f"\nRatio 2/1 of the medians of {len(samples[1])} alternated batches each: "
        f"**{rates[2] / rates[1]:.2f}** (target >= 1.6); the batches gave "
        f"{', '.join(f'{r:,.0f}' for r in samples[1])} and "
        f"{', '.join(f'{r:,.0f}' for r in samples[2])} steps/s. PostgreSQL runs on the same "
        f"{os.cpu_count()}-core machine as the workers; the CPU column is the whole machine "
        "(claims use SKIP LOCKED and steps share no row, so workers do not wait for each other). "
        "Two workers keep the machine busy; the worker processes' own CPU time per step (their "
        "rusage) grows with them, as two workers and their PostgreSQL backends take turns on "
        "two cores.\n",
    ]

    # --- W3: bytes written per step as the run grows ------------------------------------------
    wal: list[int] = []
    original = services.checkpoint_commit

    def measured(**kwargs):
        result = original(**kwargs)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
            wal.append(int(cursor.fetchone()[0]))
        return result

    # WAL is cluster-wide: let W2's rows be vacuumed now, not by autovacuum in the middle of W3,
    # and start W3 just after a checkpoint so full-page images fall alike on both windows.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
        cursor.execute("CHECKPOINT")
    # The executor looks checkpoint_commit up on the runs_app.services package at each step, so
    # replacing the package's name intercepts every step commit of the run.
    services.checkpoint_commit = measured
    try:
        run_id = create_runs(project, registry.get("bench200"), 1)[0]
        while run_one("bench-w3", registry=registry) is not None:
            pass
    finally:
        services.checkpoint_commit = original
    assert Run.objects.get(id=run_id).status == "succeeded"
    per_step = [b - a for a, b in zip(wal, wal[1:], strict=False)]
    early, late = per_step[:10], per_step[-10:]
    ratio = statistics.median(late) / statistics.median(early)
    lines += [
        "### W3: bytes written per step (one workflow, 200 steps, 500-byte chunks)\n",
        "| steps | WAL bytes per step, median | mean | max |",
        "|---|---:|---:|---:|",
        f"| 2-11 | {statistics.median(early):,.0f} | {statistics.mean(early):,.0f} | "
        f"{max(early):,} |",
        f"| 191-200 | {statistics.median(late):,.0f} | {statistics.mean(late):,.0f} | "
        f"{max(late):,} |",
        f"\nRatio late/early of the medians: **{ratio:.2f}** (target <= 1.2; of the means "
        f"{statistics.mean(late) / statistics.mean(early):.2f}): storage grows with new content "
        "only (state deltas, the session referenced by length). The WAL position is the "
        "cluster's, so a step that shares its window with background writes (autovacuum, a "
        "checkpoint's full-page images) reads high: the median is the step's own cost. W3 "
        "starts after a `VACUUM` and a `CHECKPOINT`.\n",
        w3_table_bytes(w3_fresh, w3_steady, W3_STEPS * 500),
    ]
    lines.append(messages_section(project, registry))
    body = "\n".join(lines)
    print(body)
    if not args.quick:
        write_section("runs", "Durable runs (PostgreSQL)", body, "python benchmarks/runs.py")


if __name__ == "__main__":
    main()
