"""Replay throughput (issue 22): steps/s of ``runs_app.replay.replay_run`` against live
execution of the same workflow, in the same run, on PostgreSQL.

    python benchmarks/replay.py            # appends/rewrites its section of RESULTS.md
    python benchmarks/replay.py --quick    # fewer runs, prints only

Two workflows of 20 steps each:

* ``linear``: every step appends one ~200-byte chunk and adds a key to the state;
* ``agent``: every step runs a ``flow.Agent`` (scripted provider: one tool call, then an
  answer: four chunks) and one ``ctx.effect``.

Live: the run is created and executed by the worker path (``run_one``: claim, lease, one
checkpoint per step). Replay: ``replay_run`` on the finished run (every model answer, tool
result and effect served from the record, one comparison per checkpoint, the replay run stored).
Live and replay alternate run by run, so both see the same noise; each figure is the median
over the runs of steps / wall-clock seconds. Database: ``h2`` (dropped and created).
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

STEPS = 20
DATABASE = "h2"


def _workflows() -> tuple[type, type]:
    from openrath_project import flow

    def linear_step(index: int) -> Any:
        def handler(self: Any, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            ctx.session.append(f"step {index} " + "x" * 190, role="assistant")
            return {**state, f"s{index}": index}

        return handler

    def agent_step(index: int) -> Any:
        def handler(self: Any, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            provider = flow.Provider(
                "scripted",
                fixture=[
                    {
                        "text": "Looking.",
                        "tool_calls": [
                            {"id": f"c{index}", "name": "lookup", "arguments": {"n": index}}
                        ],
                    },
                    {"text": f"Step {index} done."},
                ],
            )
            flow.Agent("You look things up.", provider, tools=[lookup], name="bench")(ctx.session)
            receipt = ctx.effect(f"note-{index}", record_note, index)
            return {**state, f"s{index}": receipt}

        return handler

    @flow.tool
    def lookup(n: int) -> dict[str, int]:
        """Look a number up."""
        return {"n": n, "square": n * n}

    def record_note(index: int, idempotency_key: str = "") -> dict[str, int]:
        return {"noted": index}

    def build(name: str, make: Any) -> type:
        body: dict[str, Any] = {"name": f"bench_replay_{name}"}
        for index in range(STEPS):
            successors = (f"s{index + 1}",) if index + 1 < STEPS else ()
            body[f"s{index}"] = flow.step(
                entry=index == 0, successors=successors, effects="non_idempotent"
            )(make(index))
        return type(f"BenchReplay{name.title()}", (flow.Workflow,), body)

    return build("linear", linear_step), build("agent", agent_step)


def measure(runs: int) -> dict[str, dict[str, float]]:
    from openrath_project.tenancy.models import Project, Tenant
    from runs_app import services
    from runs_app.executor import run_one
    from runs_app.models import Run
    from runs_app.registry import WorkflowRegistry
    from runs_app.replay import replay_run

    tenant = Tenant.objects.create(slug="bench-replay", name="bench")
    project = Project.objects.create(tenant=tenant, slug="bench", name="bench")
    registry = WorkflowRegistry()
    results: dict[str, dict[str, float]] = {}
    for cls in _workflows():
        registered = registry.register(cls)
        live: list[float] = []
        replayed: list[float] = []
        for _ in range(runs + 1):  # the first pair warms caches up and is not counted
            started = time.perf_counter()
            run, _ = services.run_create(project=project, workflow=registered, state={})
            while run_one("bench-replay", registry=registry) is not None:
                pass
            live_seconds = time.perf_counter() - started
            done = Run.objects.get(id=run.id)
            assert done.status == "succeeded", done.error
            started = time.perf_counter()
            replay = replay_run(run=done, registry=registry)
            replay_seconds = time.perf_counter() - started
            report = replay.output or {}
            assert report.get("identical") is True, report.get("first_difference")
            assert report.get("steps_replayed") == STEPS
            live.append(STEPS / live_seconds)
            replayed.append(STEPS / replay_seconds)
        live, replayed = live[1:], replayed[1:]
        results[registered.name] = {
            "live": statistics.median(live),
            "replay": statistics.median(replayed),
            "ratio": statistics.median(r / x for r, x in zip(replayed, live, strict=True)),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 15)
    setup_django(fresh_postgres(DATABASE))
    results = measure(runs)
    rows = "\n".join(
        f"| `{name.removeprefix('bench_replay_')}` | {r['live']:.1f} | {r['replay']:.1f} "
        f"| {r['ratio']:.2f} |"
        for name, r in results.items()
    )
    body = f"""
{runs} runs of {STEPS} steps per workflow, live and replay alternated run by run; medians of
steps/s (wall clock, one process; live = create + claim + execute through `run_one`, replay =
`replay_run` on the finished run, report stored). The ratio is the median of the per-run
ratios (replay / live).

| workflow | live steps/s | replay steps/s | replay / live |
| --- | --- | --- | --- |
{rows}
"""
    print(body)
    if not args.quick:
        command = "python benchmarks/replay.py" + (f" --runs {args.runs}" if args.runs else "")
        write_section("replay", "Replay (issue 22)", body, command)


if __name__ == "__main__":
    main()
