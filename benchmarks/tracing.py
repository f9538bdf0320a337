"""Tracing overhead (issue 24): W1 step overhead with tracing on vs off, in the same run.

    python benchmarks/tracing.py            # 5 alternated block pairs; rewrites its section
    python benchmarks/tracing.py --quick    # 2 pairs of 10 runs, prints only

W1's workflow (20 no-op steps, each appending one ~200-byte chunk) executed by a
``manage.py run_worker`` process: blocks of runs with tracing off (no OTEL variable) alternated
with blocks with tracing on, exporting every span over OTLP/HTTP to a local collector (an OTLP
receiver in this process that decodes each batch and counts its spans; ``--phoenix`` sends to a
real Arize Phoenix instead, which competes for the same cores). Per-step time is the interval
between consecutive checkpoints of a run, as in W1; the per-step p50 of each mode is the median
over all its blocks. Target: on / off <= 1.15.

With tracing on, each step is a step span plus the spans of the instrumented libraries inside
it (its psycopg statements), all sampled.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    REPO,
    fresh_postgres,
    median_ms,
    p99_ms,
    setup_django,
    write_section,
)
from benchmarks.runs import STEPS, create_runs, workflow_module  # noqa: E402


class Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1: answers 200 and counts the spans it got."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.spans = 0
        self.requests = 0
        self.names: collections.Counter[str] = collections.Counter()
        lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                names = [
                    span.name
                    for resource in request.resource_spans
                    for scope in resource.scope_spans
                    for span in scope.spans
                ]
                with lock:
                    collector.spans += len(names)
                    collector.names.update(names)
                    collector.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


def worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A run_worker process that executes what is queued in its database, then exits (idle)."""
    return subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "run_worker",
            "--poll",
            "0.05",
            "--idle-exit",
            "1.5",
            "--name",
            "bench-tracing",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def child(env: dict[str, str], *args: str) -> Any:
    """This script as a child on one database (``--child``): its JSON answer."""
    result = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def child_main(url: str, command: str, argument: str) -> None:
    """Migrate (``prepare``), queue ``argument`` runs (``create``: their ids) or read the
    per-step intervals of the runs listed in the file ``argument`` (``latencies``)."""
    setup_django(url)
    from openrath_project.tenancy.models import Project
    from openrath_project.tenancy.services import project_create, tenant_create
    from runs_app.models import Run
    from runs_app.registration import workflows

    if command == "prepare":
        project_create(tenant=tenant_create(slug="bench"), slug="bench")
        print(json.dumps("ok"))
    elif command == "create":
        project = Project.objects.get(slug="bench")
        ids = create_runs(project, workflows().get("bench20"), int(argument))
        print(json.dumps([str(i) for i in ids]))
    else:
        ids = json.loads(Path(argument).read_text())
        done = Run.objects.filter(id__in=ids, status="succeeded").count()
        assert done == len(ids), f"{done} of {len(ids)} runs succeeded"
        print(json.dumps(timed_intervals(ids)))


def timed_intervals(run_ids: list[str]) -> list[tuple[float, float]]:
    """(when it ended, seconds) of every interval between consecutive checkpoints (W1's
    per-step time), with its end as a Unix timestamp."""
    from runs_app.models import Checkpoint

    found = []
    for run_id in run_ids:
        times = list(
            Checkpoint.objects.filter(run_id=run_id)
            .order_by("seq")
            .values_list("created_at", flat=True)
        )
        found += [
            (b.timestamp(), (b - a).total_seconds()) for a, b in zip(times, times[1:], strict=False)
        ]
    return found


def overlapping(by_mode: dict[str, list[list[float]]]) -> dict[str, list[float]]:
    """The intervals that ended while both workers were executing steps (the one that finishes
    first leaves the machine to the other: those steps would be measured on a quieter machine)."""
    start = max(min(t for t, _ in pairs) for pairs in by_mode.values())
    end = min(max(t for t, _ in pairs) for pairs in by_mode.values())
    return {
        mode: [seconds for t, seconds in pairs if start <= t <= end]
        for mode, pairs in by_mode.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--server", default="postgres://root@127.0.0.1:5432")
    parser.add_argument("--database", default="openrath_bench_tracing", help="dropped anew")
    parser.add_argument("--phoenix", action="store_true", help="export to Arize Phoenix")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(*args.child)
        return
    rounds, runs_per_block = (2, 10) if args.quick else (6, 25)
    module_dir = Path(tempfile.mkdtemp(prefix="openrath-bench-wf-"))
    module = workflow_module(module_dir)
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        os.environ.pop(name, None)
    base_env = {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{module_dir}",
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
        "OPENRATH_WORKFLOW_MODULES": module,
        "OPENRATH_DISPATCH": "none",
        "OPENRATH_DATA_DIR": tempfile.mkdtemp(prefix="openrath-bench-"),
        "LOG_LEVEL": "WARNING",
    }
    # One database per mode: both workers run at the same time, so the machine's noise (other
    # processes, PostgreSQL's own work) hits both alike.
    urls = {mode: fresh_postgres(f"{args.database}_{mode}", args.server) for mode in ("off", "on")}
    envs = {mode: {**base_env, "DATABASE_URL": url} for mode, url in urls.items()}
    for env in envs.values():
        child(env, env["DATABASE_URL"], "prepare", "-")
    phoenix = collector = None
    if args.phoenix:
        from tests.observability.phoenix import start_phoenix

        phoenix = start_phoenix(Path(tempfile.mkdtemp(prefix="openrath-bench-phoenix-")))
        endpoint, backend = phoenix.otlp_endpoint, "Arize Phoenix (same machine)"
    else:
        collector = Collector()
        endpoint, backend = collector.endpoint, "an OTLP/HTTP receiver in the benchmark process"
    envs["on"].update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_RESOURCE_ATTRIBUTES": "openinference.project.name=bench-tracing",
        }
    )
    samples: dict[str, list[float]] = {"off": [], "on": []}
    block_p50: dict[str, list[float]] = {"off": [], "on": []}
    lists = Path(tempfile.mkdtemp(prefix="openrath-bench-ids-"))
    kept = {"off": 0, "on": 0}
    total = {"off": 0, "on": 0}
    try:
        for index in range(rounds):
            ids = {
                mode: child(env, env["DATABASE_URL"], "create", str(runs_per_block))
                for mode, env in envs.items()
            }
            workers = {mode: worker(env) for mode, env in envs.items()}
            for process in workers.values():
                assert process.wait(timeout=1800) == 0
            timed: dict[str, list[list[float]]] = {}
            for mode, env in envs.items():
                listed = lists / f"{mode}-{index}.json"
                listed.write_text(json.dumps(ids[mode]))
                timed[mode] = child(env, env["DATABASE_URL"], "latencies", str(listed))
            for mode, latencies in overlapping(timed).items():
                samples[mode] += latencies
                block_p50[mode].append(median_ms(latencies))
                kept[mode] += len(latencies)
                total[mode] += len(timed[mode])
        time.sleep(1)  # the last batch's export
        exported = collector.spans if collector is not None else None
        if collector is not None:
            print("spans by name:", collector.names.most_common(12), file=sys.stderr)
    finally:
        if collector is not None:
            collector.stop()
        if phoenix is not None:
            phoenix.stop()
    off, on = median_ms(samples["off"]), median_ms(samples["on"])
    pair_ratios = [b / a for a, b in zip(block_p50["off"], block_p50["on"], strict=True)]
    exported_note = (
        f" The collector received {exported:,} spans from the traced worker "
        f"({exported / max(1, total['on']):.2f} per step interval: the step spans and each "
        "claim's run span)."
        if exported is not None
        else ""
    )
    body = "\n".join(
        [
            f"### W1 step overhead, tracing off vs on ({rounds} rounds of {runs_per_block} "
            f"workflows x {STEPS} steps per mode; in each round a run_worker process per mode, "
            "both at the same time, each on its own database)\n",
            "| tracing | p50 ms | p99 ms | round p50s, ms |",
            "|---|---:|---:|---|",
            f"| off (no OTEL variable) | {off:.3f} | {p99_ms(samples['off']):.3f} | "
            f"{', '.join(f'{v:.3f}' for v in block_p50['off'])} |",
            f"| on (exporting every span to {backend}) | {on:.3f} | "
            f"{p99_ms(samples['on']):.3f} | {', '.join(f'{v:.3f}' for v in block_p50['on'])} |",
            f"\nRatio p50 on / off: **{on / off:.2f}** (target <= 1.15).{exported_note} "
            f"The ratio per round: {', '.join(f'{r:.2f}' for r in pair_ratios)} "
            f"(median {statistics.median(pair_ratios):.2f}). Counted: the step intervals that "
            f"ended while both workers were executing ({kept['off']:,} of {total['off']:,} off, "
            f"{kept['on']:,} of {total['on']:,} on). Both workers share the machine's "
            f"{os.cpu_count()} cores with each other and PostgreSQL, so a step takes longer than "
            "in W1's single in-process worker; the ratio is what compares.\n",
        ]
    )
    print(body)
    if not args.quick:
        write_section(
            "tracing",
            "Tracing overhead (issue 24)",
            body,
            "python benchmarks/tracing.py" + (" --phoenix" if args.phoenix else ""),
        )


if __name__ == "__main__":
    main()
