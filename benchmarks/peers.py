"""W2 against the floor and the peers (issue 20): durable steps/s of 200 workflows x 20 steps.

    python benchmarks/peers.py              # full run: 2 repetitions, ~5 min; prints the table
    python benchmarks/peers.py --write      # the same, and rewrites its section of RESULTS.md
    python benchmarks/peers.py --quick      # 40 workflows, one repetition (~75 s), prints only
    python benchmarks/peers.py --peers none # the floor and the product only (no peers' venv)

Every system runs the same shape in ONE run, repetitions alternated (each repetition runs the
systems in the opposite order of the one before, so drift on this shared machine hits all
alike): 200 workflows of 20 steps, each step appending one ~200-byte message durably (committed
before the next step starts), executed by 4 threads in one process and by 4 processes (each its
own connection). Reported: steps/s, and the ratio to the floor with the same concurrency
measured right next to it in the same repetition (before it in one repetition, after it in the
next): on a shared 2-core machine the floor itself moves by 2x within minutes, so a ratio to a
floor measured a minute earlier says little.

* **floor**: raw psycopg, one ``INSERT`` of the step's row (the message as ``jsonb``) +
  ``COMMIT`` per step, one connection per thread or process.
* **this product**: its real worker path. Runs of ``bench20`` (benchmarks/runs.py's W2
  workflow: each step appends a 200-byte session chunk and commits a checkpoint) created with
  ``services.run_create``, executed by ``manage.py run_worker`` processes: ``--threads 4`` in
  one process (the product's threaded mode: one ``Worker`` loop and one database connection a
  thread), 4 processes, and 1 and 2 processes (the 2/1 scaling of issue 20). The runs are held
  (``wake_at`` in the future) until every worker has connected, then released with one
  ``UPDATE``: the figure is from the first claim to the last finish, with no process start-up.
* **LangGraph** (``--peer langgraph``): a 20-node ``StateGraph`` whose nodes each add one
  message to ``messages`` (an ``operator.add`` channel), ``PostgresSaver`` checkpointer (a
  ``psycopg_pool`` pool in the threaded mode), ``invoke(..., durability="sync")``: a checkpoint
  is written before the next node runs.
* **DBOS** (``--peer dbos``): a ``@DBOS.workflow`` calling 20 ``@DBOS.step`` functions, each
  returning the message (DBOS records every step's output in its system database on PostgreSQL
  before the workflow goes on), the workflow called directly in each thread or process.
* **OpenRath 2.0** (``--peer openrath2``): its durable runtime on its own PostgreSQL store
  (``rath.runtime.PostgresRunStore``, schema ``openrath``): a workflow of 20 ``@step`` methods,
  each doing ``state["messages"] = state["messages"] + [message]`` (its examples keep messages
  in the state; a checkpoint per step), runs submitted before the timed window, executed by
  ``LocalRuntime.work_once`` in 4 threads (one runtime sharing the store's pool, which opens
  with one connection and adds the others at the threads' first claims) or 4 processes.

The peers run in a virtualenv of their own (``--peers-python``, default /work/peers-venv): this
script imports a peer only in a child started as ``<peers-python> benchmarks/peers.py --peer
NAME``, so neither CI nor the tests need them. Set one up with ``python3 -m venv
/work/peers-venv && /work/peers-venv/bin/pip install langgraph langgraph-checkpoint-postgres
psycopg[binary] psycopg-pool dbos openrath[postgres]==2.0.0``.

Databases (on ``--server``): ``--database`` for the product, ``--peer-database`` for the floor,
LangGraph and OpenRath 2.0, ``--dbos-database`` for DBOS's system database; all three are
dropped and made anew at the start. For the peers and the floor the window is from a barrier
that every thread or process passes once connected to the end of the last workflow; LangGraph
and DBOS create each workflow's record inside it (their first write), the product and OpenRath
2.0 create their runs before it (their queue is filled, then workers drain it).
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import DEFAULT_SERVER, REPO, fresh_postgres, setup_django  # noqa: E402

STEPS = 20
WORKFLOWS = 200
CONCURRENCY = 4
REPETITIONS = 2
PEERS = ("langgraph", "dbos", "openrath2")
DEFAULT_PEERS_PYTHON = "/work/peers-venv/bin/python"
#: The step's message: ~200 bytes of JSON, as W2's 200-byte chunk.
MESSAGE = {"role": "assistant", "content": "x" * 170}
#: ``application_name`` of the product's worker connections: how the harness sees them connect.
WORKER_APP_NAME = "openrath-peers-bench-worker"
#: OpenRath 2.0's plan revision: fixed, so the submitter and every worker compile one plan id.
OPENRATH2_REVISION = uuid.UUID("6d1f0c3e-0000-4000-8000-000000000020")


class LangGraphState(TypedDict):
    """LangGraph's state: the messages channel, appended to by each node (``operator.add``).
    At module level so LangGraph can resolve its annotations; it imports nothing of LangGraph."""

    messages: Annotated[list[dict[str, str]], operator.add]


# --- The peers' side: one child process per measurement, started with the peers' python -----


Drain = Callable[[Callable[[], int | None]], None]


def floor_connect(url: str, tag: str, steps: int) -> Callable[[int], None]:
    """The floor on a connection of its own: ``run(index)`` writes one workflow's steps."""
    import psycopg

    conn = psycopg.connect(url)
    body = json.dumps(MESSAGE)

    def run(index: int) -> None:
        workflow = uuid.uuid5(uuid.NAMESPACE_URL, f"{tag}-{index}")
        for seq in range(1, steps + 1):
            conn.execute("INSERT INTO peers_floor_steps VALUES (%s, %s, %s)", (workflow, seq, body))
            conn.commit()

    return run


def floor_prepare(url: str) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS peers_floor_steps "
            "(workflow uuid, seq int, message jsonb, PRIMARY KEY (workflow, seq))"
        )


def floor_verify(url: str, tag: str, workflows: int, steps: int) -> int:
    import psycopg

    ids = [uuid.uuid5(uuid.NAMESPACE_URL, f"{tag}-{i}") for i in range(workflows)]
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM peers_floor_steps WHERE workflow = ANY(%s)", (ids,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def langgraph_graph(url: str, connections: int, steps: int) -> tuple[Any, Any]:
    """The compiled 20-node graph on a ``PostgresSaver`` over a pool of ``connections``."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(
        url,
        min_size=connections,
        max_size=connections,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        open=True,
    )
    pool.wait()  # connected before the barrier, as every other system is
    saver = PostgresSaver(pool)

    def node(state: LangGraphState) -> dict[str, list[dict[str, str]]]:
        return {"messages": [MESSAGE]}

    builder = StateGraph(LangGraphState)
    previous = START
    for i in range(1, steps + 1):
        builder.add_node(f"s{i}", node)
        builder.add_edge(previous, f"s{i}")
        previous = f"s{i}"
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=saver), pool


def langgraph_worker(url: str, tag: str, steps: int, connections: int) -> Callable[[int], None]:
    graph, _pool = langgraph_graph(url, connections, steps)

    def run(index: int) -> None:
        config = {"configurable": {"thread_id": f"{tag}-{index}"}}
        graph.invoke({"messages": []}, config, durability="sync")

    return run


def langgraph_prepare(url: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()


def langgraph_verify(url: str, tag: str, workflows: int, steps: int) -> int:
    """Messages in each thread's last checkpoint, summed (``steps`` a workflow when whole)."""
    graph, pool = langgraph_graph(url, 1, steps)
    try:
        return sum(
            len(graph.get_state({"configurable": {"thread_id": f"{tag}-{i}"}}).values["messages"])
            for i in range(workflows)
        )
    finally:
        pool.close()


def dbos_launch(url: str, connections: int, steps: int) -> Callable[[str], None]:
    """Configure and launch DBOS in this process; returns ``run(workflow_id)``."""
    from dbos import DBOS, SetWorkflowID

    DBOS(
        config={
            "name": "openrath-peers-bench",
            "system_database_url": url,
            "sys_db_pool_size": max(4, connections + 2),
            "log_level": "WARNING",
        }
    )

    @DBOS.step()
    def append_message(i: int) -> dict[str, str]:
        return {**MESSAGE, "step": str(i)}

    @DBOS.workflow()
    def bench_workflow() -> int:
        for i in range(1, steps + 1):
            append_message(i)
        return steps

    DBOS.launch()

    def run(workflow_id: str) -> None:
        with SetWorkflowID(workflow_id):
            bench_workflow()

    return run


def dbos_worker(url: str, tag: str, steps: int, connections: int) -> Callable[[int], None]:
    launched = dbos_launch(url, connections, steps)

    def run(index: int) -> None:
        launched(f"{tag}-{index}")

    return run


def dbos_prepare(url: str) -> None:
    """Create DBOS's system schema once, so the processes' launches do not race to migrate."""
    from dbos import DBOS

    dbos_launch(url, 1, STEPS)
    DBOS.destroy()


def dbos_verify(url: str, tag: str, workflows: int, steps: int) -> int:
    """Step outputs recorded for this measurement's successful workflows."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM dbos.operation_outputs o JOIN dbos.workflow_status w "
            "ON w.workflow_uuid = o.workflow_uuid "
            "WHERE w.status = 'SUCCESS' AND w.workflow_uuid LIKE %s",
            (f"{tag}-%",),
        ).fetchone()
    assert row is not None
    return int(row[0])


def openrath2_workflow(steps: int) -> Any:
    """OpenRath 2.0's durable workflow: ``steps`` explicit ``@step`` methods in a chain."""
    from rath.definition.decorators import step
    from rath.definition.model import EffectClass

    def make(i: int) -> Callable[..., dict[str, Any]]:
        def handler(self: Any, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            state["messages"] = state["messages"] + [MESSAGE]
            return state

        successors = (f"s{i + 1}",) if i < steps else ()
        return step(entry=i == 1, successors=successors, effects=EffectClass.NONE)(handler)

    methods: dict[str, Any] = {f"s{i}": make(i) for i in range(1, steps + 1)}
    # The plan's identity includes the handlers' module: one name in the submitting process and
    # in spawned workers (where this file is ``__mp_main__``), or the workers reject the plan.
    methods["__module__"] = "benchmarks.peers"
    return type("PeersBench", (), methods)()


def openrath2_store(url: str, connections: int) -> Any:
    from rath.runtime import PostgresRunStore

    return PostgresRunStore(url, schema="openrath", pool_max_size=connections)


def openrath2_prepare(url: str, tag: str, workflows: int, steps: int) -> None:
    """Migrate OpenRath 2.0's schema and submit the measurement's runs (its queue)."""
    from rath.context import RunContext
    from rath.runtime import LocalRuntime, PostgresRunStore

    PostgresRunStore.migrate(url, schema="openrath")
    store = openrath2_store(url, 2)
    runtime = LocalRuntime(store)
    workflow = openrath2_workflow(steps)
    for i in range(workflows):
        runtime.submit(
            workflow,
            session_id=uuid.uuid4(),
            context=RunContext.local(revision_id=OPENRATH2_REVISION),
            state={"messages": []},
            idempotency_key=f"{tag}-{i}",
        )
    store.close()


def openrath2_worker(url: str, steps: int, connections: int) -> tuple[Any, Any]:
    from rath.runtime import LocalRuntime

    store = openrath2_store(url, connections)
    runtime = LocalRuntime(store)
    runtime.register(openrath2_workflow(steps), revision_id=OPENRATH2_REVISION)
    return runtime, store


def openrath2_verify(url: str, tag: str, workflows: int, steps: int) -> int:
    """Checkpoints of this measurement's succeeded runs."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM openrath.checkpoints c JOIN openrath.runs r "
            "ON r.id = c.run_id WHERE r.status = 'succeeded' AND r.idempotency_key LIKE %s",
            (f"{tag}-%",),
        ).fetchone()
    assert row is not None
    return int(row[0])


def process_setup(
    peer: str, url: str, tag: str, steps: int, connections: int
) -> Callable[[], Drain]:
    """Set ``peer`` up in this process (one graph, DBOS instance or runtime, with a pool of
    ``connections``); returns ``per_thread()``, which each thread calls before the barrier and
    which returns its ``drain(take)``: run workflows until ``take`` gives none."""

    def draining(run: Callable[[int], None]) -> Drain:
        def drain(take: Callable[[], int | None]) -> None:
            while (index := take()) is not None:
                run(index)

        return drain

    if peer == "floor":  # a connection a thread
        return lambda: draining(floor_connect(url, tag, steps))
    if peer == "openrath2":  # its runs are queued: each thread works until the queue is empty
        runtime, _store = openrath2_worker(url, steps, connections)

        def drain_queue(take: Callable[[], int | None]) -> None:
            worker = f"peers-{os.getpid()}-{threading.get_ident()}"
            while runtime.work_once(worker_id=worker) is not None:
                pass

        return lambda: drain_queue
    make = {"langgraph": langgraph_worker, "dbos": dbos_worker}[peer]
    shared = draining(make(url, tag, steps, connections))
    return lambda: shared


def measure_threads(
    peer: str, url: str, tag: str, workflows: int, steps: int, threads: int
) -> float:
    """``threads`` threads of one process draining ``workflows``: seconds from the barrier they
    pass once connected to the last one's end."""
    per_thread = process_setup(peer, url, tag, steps, threads)
    counter = iter(range(workflows))
    lock = threading.Lock()

    def take() -> int | None:
        with lock:
            return next(counter, None)

    barrier = threading.Barrier(threads)
    spans: list[tuple[float, float]] = []

    def body() -> None:
        drain = per_thread()
        barrier.wait()
        started = time.monotonic()
        drain(take)
        spans.append((started, time.monotonic()))

    pool = [threading.Thread(target=body) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return max(end for _, end in spans) - min(start for start, _ in spans)


def process_main(
    peer: str, url: str, tag: str, steps: int, counter: Any, barrier: Any, results: Any
) -> None:
    """One of the processes of ``measure_processes`` (spawned: a fresh interpreter)."""
    drain = process_setup(peer, url, tag, steps, 1)()

    def take() -> int | None:
        with counter.get_lock():
            if counter.value <= 0:
                return None
            counter.value -= 1
            return int(counter.value)

    barrier.wait()
    started = time.monotonic()
    drain(take)
    results.put((started, time.monotonic()))
    results.close()
    results.join_thread()  # the span is sent; the peers' pools and threads need no goodbye
    os._exit(0)


def measure_processes(
    peer: str, url: str, tag: str, workflows: int, steps: int, processes: int
) -> float:
    """``processes`` spawned processes (a connection each) draining ``workflows``: seconds from
    the barrier they pass once connected to the last one's end."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    counter = context.Value("i", workflows)
    barrier = context.Barrier(processes)
    results = context.Queue()
    children = [
        context.Process(
            target=process_main, args=(peer, url, tag, steps, counter, barrier, results)
        )
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    spans = [results.get(timeout=900) for _ in children]
    for child in children:
        child.join(timeout=60)
        if child.exitcode != 0:
            raise RuntimeError(f"{peer} process exited with {child.exitcode}")
    return max(end for _, end in spans) - min(start for start, _ in spans)


def peer_child(args: argparse.Namespace) -> None:
    """``--peer NAME``: one measurement of NAME; prints one JSON line."""
    peer, url, tag = args.peer, args.url, args.tag
    workflows, steps, workers = args.workflows, args.steps, args.workers
    prepare = {
        "floor": lambda: floor_prepare(url),
        "langgraph": lambda: langgraph_prepare(url),
        "dbos": lambda: dbos_prepare(url) if args.mode == "processes" else None,
        "openrath2": lambda: openrath2_prepare(url, tag, workflows, steps),
    }[peer]
    prepare()
    if args.mode == "threads":
        seconds = measure_threads(peer, url, tag, workflows, steps, workers)
    else:
        seconds = measure_processes(peer, url, tag, workflows, steps, workers)
    verify = {
        "floor": floor_verify,
        "langgraph": langgraph_verify,
        "dbos": dbos_verify,
        "openrath2": openrath2_verify,
    }[peer]
    stored = verify(url, tag, workflows, steps)
    if stored != workflows * steps:
        raise RuntimeError(f"{peer}: {stored} steps stored, {workflows * steps} expected")
    print(json.dumps({"seconds": seconds, "steps": workflows * steps}))
    if peer == "dbos" and args.mode == "threads":
        from dbos import DBOS

        DBOS.destroy()
    sys.stdout.flush()
    os._exit(0)  # the peers' background threads (DBOS, pools) need no orderly goodbye


# --- The orchestrator: the project's python, Django set up on the product's database ---------


def product_env(module_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{module_dir}",
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "LOG_LEVEL": "WARNING",
        "DATABASE_APP_NAME": WORKER_APP_NAME,
    }


def worker_connections() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [WORKER_APP_NAME],
        )
        return int(cursor.fetchone()[0])


def measure_product(
    project: Any, registry: Any, env: dict[str, str], processes: int, threads: int, n: int
) -> float:
    """``n`` runs of ``bench20`` executed by ``processes`` run_worker processes of ``threads``
    threads each; seconds from the first claim to the last finish."""
    from django.db import connection
    from django.db.models import Max, Min

    from benchmarks.runs import create_runs
    from runs_app.models import Run

    ids = create_runs(project, registry.get("bench20"), n)
    table = Run._meta.db_table
    with connection.cursor() as cursor:  # held: no worker claims one before all are up
        cursor.execute(
            f"UPDATE {table} SET wake_at = now() + interval '1 hour' WHERE id = ANY(%s)",
            [ids],
        )
    command = [sys.executable, "manage.py", "run_worker", "--poll", "0.05", "--idle-exit", "120"]
    children = [
        subprocess.Popen(
            [*command, "--threads", str(threads), "--name", f"peers-bench-{i}"],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(processes)
    ]
    try:
        started = time.monotonic()
        while worker_connections() < processes * threads:
            if any(child.poll() is not None for child in children):
                raise RuntimeError("a run_worker process exited before connecting")
            if time.monotonic() - started > 120:
                raise RuntimeError("the workers did not connect within 2 minutes")
            time.sleep(0.1)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET wake_at = NULL WHERE id = ANY(%s)",
                [ids],
            )
        while Run.objects.filter(id__in=ids, status="succeeded").count() < n:
            if Run.objects.filter(id__in=ids, status__in=("failed", "cancelled")).exists():
                raise RuntimeError("a benchmark run failed")
            if time.monotonic() - started > 900:
                raise RuntimeError("the product's batch did not finish within 15 minutes")
            time.sleep(0.1)
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(timeout=60)
    span = Run.objects.filter(id__in=ids).aggregate(a=Min("started_at"), b=Max("finished_at"))
    return (span["b"] - span["a"]).total_seconds()


def run_child(python: str, peer: str, mode: str, url: str, tag: str, n: int) -> float:
    """One measurement of a peer (or the floor) in a child process; its window in seconds."""
    command = [python, str(Path(__file__).resolve()), "--peer", peer, "--mode", mode]
    command += ["--url", url, "--tag", tag, "--workflows", str(n), "--steps", str(STEPS)]
    command += ["--workers", str(CONCURRENCY)]
    child = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=900, check=False
    )
    if child.returncode != 0:
        raise RuntimeError(f"{peer} ({mode}) failed:\n{child.stderr[-3000:]}")
    return float(json.loads(child.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="40 workflows, one repetition")
    parser.add_argument("--repetitions", type=int, default=None)
    parser.add_argument("--server", default=DEFAULT_SERVER)
    parser.add_argument("--database", default="openrath_bench_peers", help="the product's")
    parser.add_argument("--peer-database", default="openrath_bench_peers_floor")
    parser.add_argument("--dbos-database", default="openrath_bench_peers_dbos")
    parser.add_argument("--peers-python", default=DEFAULT_PEERS_PYTHON)
    parser.add_argument("--write", action="store_true", help="rewrite the section of RESULTS.md")
    parser.add_argument(
        "--peers", default=",".join(PEERS), help=f"comma-separated of {PEERS}, or 'none'"
    )
    # A child's options: one measurement of one peer (run with the peers' python).
    parser.add_argument("--peer", choices=("floor", *PEERS), help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("threads", "processes"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--tag", help=argparse.SUPPRESS)
    parser.add_argument("--workflows", type=int, default=WORKFLOWS, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=STEPS, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=CONCURRENCY, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        peer_child(args)
        return
    peers = [] if args.peers == "none" else [p for p in args.peers.split(",") if p]
    unknown = set(peers) - set(PEERS)
    if unknown:
        parser.error(f"unknown peers {sorted(unknown)}; choose from {PEERS}")
    if peers and not Path(args.peers_python).exists():
        parser.error(f"--peers-python {args.peers_python} does not exist (see the docstring)")
    n = 40 if args.quick else WORKFLOWS
    repetitions = args.repetitions or (1 if args.quick else REPETITIONS)

    from benchmarks.runs import workflow_module

    module_dir = Path(tempfile.mkdtemp(prefix="openrath-bench-peers-wf-"))
    module = workflow_module(module_dir)
    sys.path.insert(0, str(module_dir))
    os.environ["OPENRATH_WORKFLOW_MODULES"] = module
    os.environ["OPENRATH_DISPATCH"] = "none"
    floor_url = fresh_postgres(args.peer_database, args.server)
    dbos_url = fresh_postgres(args.dbos_database, args.server)
    url = fresh_postgres(args.database, args.server)
    setup_django(url)
    from openrath_project.tenancy.services import project_create, tenant_create
    from runs_app.registration import workflows

    project = project_create(tenant=tenant_create(slug="bench"), slug="bench")
    registry = workflows()
    env = product_env(module_dir)

    def product(processes: int, threads: int) -> Callable[[str], float]:
        return lambda tag: measure_product(project, registry, env, processes, threads, n)

    def child(python: str, peer: str, mode: str, target: str) -> Callable[[str], float]:
        return lambda tag: run_child(python, peer, mode, target, tag, n)

    floors = {
        mode: child(sys.executable, "floor", mode, floor_url) for mode in ("threads", "processes")
    }
    systems: dict[tuple[str, str], Callable[[str], float]] = {
        ("product", "threads"): product(1, CONCURRENCY),
        ("product", "processes"): product(CONCURRENCY, 1),
        ("product", "1 process"): product(1, 1),
        ("product", "2 processes"): product(2, 1),
    }
    for peer in peers:
        target = dbos_url if peer == "dbos" else floor_url
        for mode in ("threads", "processes"):
            systems[(peer, mode)] = child(args.peers_python, peer, mode, target)

    rates: dict[tuple[str, str], list[float]] = {key: [] for key in systems}
    rates |= {("floor", mode): [] for mode in floors}
    paired: dict[tuple[str, str], list[float]] = {key: [] for key in systems}

    def measure(rep: int, key: tuple[str, str]) -> float:
        tag = f"r{rep}-{key[0]}-{key[1].replace(' ', '')}-{uuid.uuid4().hex[:6]}"
        began = time.monotonic()
        seconds = (floors[key[1]] if key[0] == "floor" else systems[key])(tag)
        rates[key].append(n * STEPS / seconds)
        print(
            f"rep {rep + 1} {key[0]:>9} {key[1]:>11}: {rates[key][-1]:8,.0f} steps/s "
            f"({seconds:.1f} s window, {time.monotonic() - began:.1f} s with set-up)",
            file=sys.stderr,
            flush=True,
        )
        return rates[key][-1]

    load_before = os.getloadavg()
    started = time.monotonic()
    for rep in range(repetitions):
        # Alternated: each repetition runs the systems in the opposite order of the one before,
        # and each system's floor (same concurrency) right before it, then right after it.
        for key in list(systems) if rep % 2 == 0 else list(reversed(systems)):
            if key[1] not in floors:  # the 1- and 2-process pair: compared with each other
                measure(rep, key)
                continue
            pair = [("floor", key[1]), key] if rep % 2 == 0 else [key, ("floor", key[1])]
            figures = {k: measure(rep, k) for k in pair}
            paired[key].append(figures[key] / figures[("floor", key[1])])
    elapsed = time.monotonic() - started
    load_after = os.getloadavg()
    body = report(rates, paired, peers, n, repetitions, elapsed, load_before, load_after)
    print(body)
    if args.write and not args.quick:
        from benchmarks._common import write_section

        write_section(
            "peers",
            "W2 against the floor and the peers (PostgreSQL)",
            body + "\n\n" + SETUP,
            f"python benchmarks/peers.py --write --peers {','.join(peers) or 'none'}",
        )


SETUP = """\
The peers run from a virtualenv outside the project (nothing of theirs is a dependency of this
one): `python3 -m venv /work/peers-venv && /work/peers-venv/bin/pip install langgraph
langgraph-checkpoint-postgres 'psycopg[binary]' psycopg-pool dbos 'openrath[postgres]==2.0.0'`
(measured with langgraph 1.2.24, langgraph-checkpoint-postgres 3.2.0, dbos 3.4.0, openrath
2.0.0); `--peers-python` names another one, `--peers none` measures the floor and the product
only."""


LABELS = {
    "floor": "floor: raw psycopg INSERT + COMMIT",
    "product": "**this product** (`run_worker`)",
    "langgraph": "LangGraph, PostgresSaver, durability sync",
    "dbos": "DBOS, 20 steps",
    "openrath2": "OpenRath 2.0, PostgresRunStore",
}


def report(
    rates: dict[tuple[str, str], list[float]],
    paired: dict[tuple[str, str], list[float]],
    peers: list[str],
    n: int,
    repetitions: int,
    elapsed: float,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> str:
    """The table: median steps/s of each system and mode, and the median of its ratios to the
    floor measured next to it (same concurrency, same repetition)."""

    def ratio(key: tuple[str, str]) -> float:
        return 1.0 if key[0] == "floor" else statistics.median(paired[key])

    med = {key: statistics.median(values) for key, values in rates.items()}
    lines = [
        f"### W2 against the floor and the peers ({n} workflows x {STEPS} steps, "
        f"{CONCURRENCY} threads / {CONCURRENCY} processes)\n",
        "| system | steps/s, 4 threads | / floor | steps/s, 4 processes | / floor |",
        "|---|---:|---:|---:|---:|",
    ]
    for system in ("floor", "product", *peers):
        threads, processes = (system, "threads"), (system, "processes")
        lines.append(
            f"| {LABELS[system]} | {med[threads]:,.0f} | {ratio(threads):.2f} | "
            f"{med[processes]:,.0f} | {ratio(processes):.2f} |"
        )
    leads = {
        mode: min((ratio(("product", mode)) / ratio((peer, mode)) for peer in peers), default=None)
        for mode in ("threads", "processes")
    }
    scaling = statistics.median(
        a / b
        for a, b in zip(
            rates[("product", "2 processes")], rates[("product", "1 process")], strict=True
        )
    )
    lead = (
        f"The product's ratio over the best peer's: {leads['threads']:.2f} with threads, "
        f"{leads['processes']:.2f} with processes (issue 20: > 1, and >= 0.4 x the floor). "
        if leads["threads"] is not None and leads["processes"] is not None
        else "Issue 20's target: >= 0.4 x the floor, ahead of every peer. "
    )
    lines.append(
        f"\n{lead}Each ratio is the median over the repetitions of the system's steps/s over "
        "the floor's measured right before or after it with the same concurrency. "
        f"This product with 1 and 2 worker processes: {med[('product', '1 process')]:,.0f} and "
        f"{med[('product', '2 processes')]:,.0f} steps/s, ratio 2/1 **{scaling:.2f}** (median of "
        f"the repetitions' ratios). Medians of {repetitions} alternated repetitions; every "
        "measurement's steps/s, in order: "
        + "; ".join(f"{s} {m} {', '.join(f'{r:,.0f}' for r in rates[(s, m)])}" for s, m in rates)
        + "; ratios to the adjacent floor: "
        + "; ".join(
            f"{s} {m} {', '.join(f'{r:.2f}' for r in paired[(s, m)])}"
            for s, m in paired
            if paired[(s, m)]
        )
        + f". 1-minute load average before / after: {load_before[0]:.1f} / {load_after[0]:.1f} "
        f"on {os.cpu_count()} cores; {elapsed:.0f} s in all.\n"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
