"""Console benchmark: the run page of a 200-step run with 4 branches, loaded in Chromium.

    python benchmarks/console.py            # rewrites its RESULTS.md section
    python benchmarks/console.py --quick    # 3 loads, prints only

A fresh PostgreSQL database; the run is executed in this process (the engine's own worker loop,
``runs_app.executor.run_one``) until it succeeds: a loop of ``tick`` steps and ``more`` router
decisions (196 steps), then a fan-out ``split`` into four branch runs and their ``review`` join
(200 steps and more, 5 lanes in the waterfall). A real server (``manage.py serve``) on
127.0.0.1 serves the console; Debian's Chromium, driven by Playwright, logs in and loads the
run page repeatedly with a cold cache each time (a new browser context). Measured in the
browser (the Navigation Timing entry of the page): the time to the first byte, to
DOMContentLoaded and to the load event (every stylesheet and script in), from the start of the
navigation; page weight: the HTML and every resource (decoded bytes) and the DOM's size.
The target: the load event under 1 s (median of the loads).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    REPO,
    free_ports,
    fresh_postgres,
    setup_django,
    write_section,
)

CHROMIUM = os.environ.get("OPENRATH_CHROMIUM", "/usr/bin/chromium")
LOOP_STEPS = 98  # tick + more per round: 196 steps before the fan-out
BRANCHES = ("north", "south", "east", "west")
PASSWORD = "benchmark-console-password"  # noqa: S105 - a throw-away database's user
TARGET_MS = 1000.0


def _workflow() -> Any:
    from openrath_project import flow

    class ConsoleBench(flow.Workflow):
        """Loops ``tick`` / ``more`` until the count is reached, then fans out to four branches
        joined by ``review``."""

        name = "console_bench"

        @flow.step(entry=True, successors=("more",), effects="none")
        def tick(self, state, ctx):
            return {**state, "count": state.get("count", 0) + 1}

        @flow.router(successors=("tick", "split"))
        def more(self, state, ctx):
            return "tick" if state["count"] < LOOP_STEPS else "split"

        @flow.router(successors=BRANCHES)
        def split(self, state, ctx):
            return list(BRANCHES)

        @flow.step(successors=("review",), effects="none")
        def north(self, state, ctx):
            return {**state, "north": "ok"}

        @flow.step(successors=("review",), effects="none")
        def south(self, state, ctx):
            return {**state, "south": "ok"}

        @flow.step(successors=("review",), effects="none")
        def east(self, state, ctx):
            return {**state, "east": "ok"}

        @flow.step(successors=("review",), effects="none")
        def west(self, state, ctx):
            return {**state, "west": "ok"}

        @flow.step(join=True, effects="none")
        def review(self, state, ctx):
            return {**state, "reviewed": len(state["branches"])}

    return ConsoleBench


def build_run() -> tuple[str, int, int]:
    """The benchmark's run, executed to the end: ``(run id, steps, events)``."""
    from openrath_project.tenancy.services import project_create, tenant_create, user_join_tenant
    from runs_app.executor import run_one
    from runs_app.models import Checkpoint, Run, RunEvent
    from runs_app.registry import WorkflowRegistry
    from runs_app.services import run_create

    registry = WorkflowRegistry()
    registry.register(_workflow())
    tenant = tenant_create(slug="bench")
    project = project_create(tenant=tenant, slug="console")
    user_join_tenant(tenant=tenant, username="operator", role="operator", password=PASSWORD)
    run, _ = run_create(project=project, workflow=registry.get("console_bench"), state={})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        status = Run.objects.get(id=run.id).status
        if status in ("succeeded", "failed", "cancelled", "timed_out"):
            break
        if run_one("bench-worker", registry=registry) is None:
            time.sleep(0.01)
    run.refresh_from_db()
    if run.status != "succeeded":
        raise RuntimeError(f"the benchmark run ended {run.status}: {run.error}")
    ids = [run.id, *Run.objects.filter(parent=run).values_list("id", flat=True)]
    steps = Checkpoint.objects.filter(run_id__in=ids).count()
    events = RunEvent.objects.filter(run_id__in=ids).count()
    return str(run.id), steps, events


def start_server(port: int, database_url: str, data_dir: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENRATH_", "DJANGO_"))}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
            "DATABASE_URL": database_url,
            "OPENRATH_DATA_DIR": data_dir,
            "OPENRATH_DISPATCH": "none",
            "OPENRATH_EMBEDDED_WORKERS": "0",
            "SECRET_KEY": "console-benchmark-only-" + "x" * 40,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
        }
    )
    server = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "manage.py"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as reply:
                if reply.status == 200:
                    return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise RuntimeError("the server did not become healthy within 60s")


MEASURE = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const resources = performance.getEntriesByType('resource');
  return {
    ttfb: nav.responseStart - nav.startTime,
    dcl: nav.domContentLoadedEventEnd - nav.startTime,
    load: nav.loadEventEnd - nav.startTime,
    html_bytes: nav.decodedBodySize,
    resource_bytes: resources.reduce((n, r) => n + r.decodedBodySize, 0),
    resources: resources.length,
    dom_nodes: document.getElementsByTagName('*').length,
    spans: document.querySelectorAll('#waterfall g.span').length,
    lanes: new Set(Array.from(document.querySelectorAll('#waterfall g.span'))
                   .map(s => s.dataset.lane)).size,
    events: document.querySelectorAll('#events li[data-seq]').length,
  };
}"""


def measure(base_url: str, run_id: str, loads: int) -> list[dict[str, float]]:
    from playwright.sync_api import sync_playwright

    samples = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-background-networking"]
        )
        try:
            for _ in range(loads + 1):  # the first load warms the server (not counted)
                context = browser.new_context(
                    base_url=base_url, viewport={"width": 1400, "height": 900}
                )
                page = context.new_page()
                page.goto("/console/login/")
                page.fill("input[name=username]", "operator")
                page.fill("input[name=password]", PASSWORD)
                page.click("button[type=submit]")
                page.wait_for_url("**/console/")
                page.goto(f"/console/runs/{run_id}/", wait_until="load")
                page.wait_for_function(
                    "() => performance.getEntriesByType('navigation')[0].loadEventEnd > 0"
                )
                samples.append(page.evaluate(MEASURE))
                context.close()
        finally:
            browser.close()
    return samples[1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    loads = 3 if args.quick else 15
    data_dir = tempfile.mkdtemp(prefix="openrath-bench-console-")
    database_url = fresh_postgres("openrath_bench_console")
    os.environ["OPENRATH_DISPATCH"] = "none"
    setup_django(database_url, data_dir)
    started = time.perf_counter()
    run_id, steps, events = build_run()
    built = time.perf_counter() - started
    port = free_ports(1)[0]
    server = start_server(port, database_url, data_dir)
    try:
        samples = measure(f"http://127.0.0.1:{port}", run_id, loads)
    finally:
        server.terminate()
        server.wait(timeout=30)

    def med(key: str) -> float:
        return statistics.median(s[key] for s in samples)

    def worst(key: str) -> float:
        return max(s[key] for s in samples)

    first = samples[0]
    verdict = "met" if med("load") < TARGET_MS else "NOT met"
    quick = " (quick)" if args.quick else ""
    body = f"""
The run page (`/console/runs/<id>/`) of one run: {steps} steps (checkpoints over the run and its
{len(BRANCHES)} branch runs) and {events} events, executed in {built:.1f} s before the
measurement. {len(samples)} loads in Chromium{quick}, each in a fresh browser context (cold
cache, logged in first), after one warm-up load that is not counted. Times from the start of
the navigation, read from the page's Navigation Timing entry.

| measure | median | worst |
|---|---:|---:|
| first byte (the server renders the page) | {med("ttfb"):.0f} ms | {worst("ttfb"):.0f} ms |
| DOMContentLoaded | {med("dcl"):.0f} ms | {worst("dcl"):.0f} ms |
| load event (stylesheets and scripts in) | **{med("load"):.0f} ms** | {worst("load"):.0f} ms |

Target: the load event under {TARGET_MS:.0f} ms (median): **{verdict}**.

Page weight: the HTML {first["html_bytes"] / 1024:.0f} KiB (decoded) and {first["resources"]}
other resources of {first["resource_bytes"] / 1024:.0f} KiB; {first["dom_nodes"]:,} DOM
elements. The waterfall draws {first["spans"]} spans in {first["lanes"]} lanes; the timeline
lists the latest {first["events"]} events.
"""
    print(body)
    if not args.quick:
        write_section(
            "console",
            "Console: the run page of a 200-step run",
            body,
            "python benchmarks/console.py",
        )


if __name__ == "__main__":
    main()
