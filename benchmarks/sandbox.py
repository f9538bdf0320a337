"""What the OS sandbox costs per tool command: the bubblewrap backend against the path-confined
local fallback, the same commands in the same workspace.

    python benchmarks/sandbox.py              # full run, rewrites its RESULTS.md section
    python benchmarks/sandbox.py --quick      # fewer repetitions, prints only

Each figure is the median (and p99) of wall-clock time per call from the tool's point of view
(`run_shell` / `run_python` on the backend: spawn, limits, wait, capture), one run, alternated
between the backends so machine noise falls on both. No database is needed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import median_ms, p99_ms, write_section  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeat = 20 if args.quick else 200

    from sessions_app.sandbox.bwrap import BwrapSandbox, bwrap_probe
    from sessions_app.sandbox.local import LocalSandbox
    from sessions_app.tools.policy import ToolPolicy

    probe = bwrap_probe()
    if not probe.ok or probe.path is None:
        raise SystemExit(f"bubblewrap does not work here: {probe.detail}")
    workspace = tempfile.mkdtemp(prefix="openrath-bench-sandbox-")
    policy = ToolPolicy()
    backends = {
        "local": LocalSandbox(workspace, policy),
        "bwrap": BwrapSandbox(
            workspace, policy, bwrap=probe.path, disable_userns=probe.disable_userns
        ),
    }
    commands = {
        "shell `true`": lambda b: b.run_shell("true"),
        "shell `echo` + file write": lambda b: b.run_shell("echo hi > out.txt && cat out.txt"),
        "python `print(1)`": lambda b: b.run_python("print(1)"),
    }
    samples: dict[tuple[str, str], list[float]] = {}
    for label, call in commands.items():
        for _ in range(3):  # warm both (page cache, the interpreter's imports)
            for backend in backends.values():
                call(backend)
        for _ in range(repeat):
            for name, backend in backends.items():
                started = time.perf_counter()
                result = call(backend)
                samples.setdefault((label, name), []).append(time.perf_counter() - started)
                if result.exit_code != 0:
                    raise SystemExit(f"{name} {label} failed: {result.stderr}")

    rows = [
        "| command | local p50 ms | bwrap p50 ms | bwrap / local | local p99 | bwrap p99 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label in commands:
        local, bwrap = samples[(label, "local")], samples[(label, "bwrap")]
        rows.append(
            f"| {label} | {median_ms(local):.2f} | {median_ms(bwrap):.2f} | "
            f"{median_ms(bwrap) / median_ms(local):.2f} | {p99_ms(local):.2f} | "
            f"{p99_ms(bwrap):.2f} |"
        )
    body = (
        f"{repeat} calls per command and backend, alternated, after 3 warm-up calls; bubblewrap "
        f"at {probe.path}{' (nested user namespaces disabled)' if probe.disable_userns else ''}. "
        "The bwrap "
        "column includes building the namespaces, the read-only root and `prlimit` for every "
        "call; the local one `prlimit` and a new process group.\n\n" + "\n".join(rows)
    )
    print(body)
    if not args.quick:
        write_section(
            "sandbox", "Tool sandbox (bubblewrap vs local)", body, "python benchmarks/sandbox.py"
        )


if __name__ == "__main__":
    main()
