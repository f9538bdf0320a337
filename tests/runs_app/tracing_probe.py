"""Run durable workflows in this process, then run one under cProfile and one under
``sys.settrace``: ``python -m tests.runs_app.tracing_probe`` (from the project root, with
``OPENRATH_DATA_DIR`` set to an empty directory; the embedded profile needs nothing else).

A debugger, profiler or trace-based coverage tool must keep working after steps ran and after a
step was preempted. Prints one line per phase; a hang is the failure the caller's timeout sees.
"""

from __future__ import annotations

import cProfile
import sys
from typing import Any

from openrath_project.library import default_project, ensure_ready


def main() -> None:
    ensure_ready()
    from runs_app import services
    from runs_app.executor import run_one
    from runs_app.registry import WorkflowRegistry
    from tests.runs_app.workflows import semantics

    registry = WorkflowRegistry()
    registry.discover([semantics.__name__])
    project = default_project()

    def run(name: str) -> str:
        row, _ = services.run_create(project=project, workflow=registry.get(name), state={})
        outcome = run_one("probe", registry=registry, run_id=row.id)
        assert outcome is not None
        return outcome.status

    print("plain", run("sem-quick"), flush=True)
    print("preempted", run("sem-spin"), flush=True)
    profiler = cProfile.Profile()
    print("profiled", profiler.runcall(run, "sem-quick"), flush=True)
    calls: list[str] = []

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event == "call":
            calls.append(frame.f_code.co_name)
        return None

    sys.settrace(tracer)
    try:
        status = run("sem-quick")
    finally:
        sys.settrace(None)
    print("traced", status, "fast" in calls, flush=True)


if __name__ == "__main__":
    main()
