"""Agent loop benchmark on PostgreSQL: per-turn overhead with the scripted provider, and tool
dispatch overhead.

    python benchmarks/agents.py            # full run, rewrites its RESULTS.md section
    python benchmarks/agents.py --quick    # fewer samples, prints only

The scripted provider answers instantly, so the time of an agent call is everything except
model time: reading the session, building the messages, dispatching tools, appending and
tagging chunks. In the same run it measures the floor that any persisted turn pays: appending
the same chunks with ``chunks_append`` (one transaction each), so the overhead of the loop is
the difference. Tool dispatch (lookup, argument parsing and JSON-schema validation, the call,
output capping) is compared with calling the same Python function directly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    fresh_postgres,
    median_ms,
    p99_ms,
    setup_django,
    timed,
    write_section,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--server", default="postgres://root@127.0.0.1:5432")
    args = parser.parse_args()
    setup_django(fresh_postgres("openrath_bench_agents", args.server))

    from openrath_project.tenancy.services import project_create, tenant_create
    from sessions_app import services
    from sessions_app.agents import Agent
    from sessions_app.chunk_rules import make_draft
    from sessions_app.providers import make_provider
    from sessions_app.providers.base import ToolCallRequest
    from sessions_app.tools import dispatch_tool, tool
    from sessions_app.value import Session

    tenant = tenant_create(slug="bench")
    project = project_create(tenant=tenant, slug="bench")
    repeat = 60 if args.quick else 400

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first number.
            b: The second number.
        """
        return a + b

    answer = "The answer is five, " + "x" * 160  # ~200-byte chunks, as in the other benchmarks
    call = {"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]}

    def agent_call(turns: list[dict[str, Any]], tools: list[Any]) -> float:
        """One agent call on a fresh two-chunk session; seconds (set-up not timed)."""
        import time

        session = Session.from_user_message("What is 2 + 3?", project=project)
        agent = Agent(
            "You add numbers.", make_provider("scripted", turns=turns), tools=tools, name="adder"
        )
        started = time.perf_counter()
        agent(session)
        return time.perf_counter() - started

    def appends(count: int) -> float:
        """The floor: the same number of chunk appends, one transaction each."""
        import time

        session = Session.from_user_message("What is 2 + 3?", project=project)
        started = time.perf_counter()
        for _ in range(count):
            services.chunks_append(
                session=session.row, drafts=[make_draft(role="assistant", content={"text": answer})]
            )
        return time.perf_counter() - started

    for _ in range(20):  # warm up connections, caches and prepared statements
        agent_call([{"text": answer}], [])
        agent_call([call, {"text": answer}], [add])
        appends(1)

    rows = []
    scenarios = [
        ("text answer (1 model turn, 1 chunk)", [{"text": answer}], [], 1, 1),
        ("tool round trip (2 model turns, 3 chunks)", [call, {"text": answer}], [add], 2, 3),
    ]
    for label, turns, tools, model_turns, chunks in scenarios:
        agent_samples, floor_samples = [], []
        for _ in range(repeat):  # alternate, so drift hits both alike
            agent_samples.append(agent_call(turns, tools))
            floor_samples.append(appends(chunks))
        rows.append(
            (
                label,
                median_ms(agent_samples),
                p99_ms(agent_samples),
                median_ms(floor_samples),
                (median_ms(agent_samples) - median_ms(floor_samples)) / model_turns,
                median_ms(agent_samples) / median_ms(floor_samples),
            )
        )

    # --- tool dispatch ------------------------------------------------------------------
    session = Session.from_user_message("dispatch", project=project)
    request = ToolCallRequest(id="c1", name="add", arguments='{"a": 2, "b": 3}')
    tools = {"add": add}
    dispatch_repeat = 2000 if args.quick else 20000
    for _ in range(500):
        dispatch_tool(tools, session, request)
    dispatched = timed(lambda: dispatch_tool(tools, session, request), dispatch_repeat)
    direct = timed(lambda: add(session, {"a": 2, "b": 3}), dispatch_repeat)

    lines = [
        "### Per-turn overhead of the agent loop (scripted provider: no model time)\n",
        f"{repeat} calls per scenario, each on a fresh session; the floor is appending the same "
        "chunks with `chunks_append` (one transaction each), alternated with the agent calls.\n",
        "| scenario | agent call p50 ms | p99 ms | floor (appends) p50 ms | loop overhead per "
        "model turn, p50 ms | ratio call / floor |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, p50, p99, floor, overhead, ratio in rows:
        lines.append(
            f"| {label} | {p50:.3f} | {p99:.3f} | {floor:.3f} | {overhead:.3f} | {ratio:.2f} |"
        )
    lines += [
        "\n### Tool dispatch overhead\n",
        f"{dispatch_repeat} calls of a two-integer `add` tool: `dispatch_tool` (lookup, JSON "
        "parsing, JSON-schema validation, the call, output capping) against calling the tool "
        "object directly.\n",
        "| path | p50 µs | p99 µs |",
        "|---|---:|---:|",
        f"| `dispatch_tool` | {median_ms(dispatched) * 1000:.1f} | "
        f"{p99_ms(dispatched) * 1000:.1f} |",
        f"| direct call | {median_ms(direct) * 1000:.1f} | {p99_ms(direct) * 1000:.1f} |",
        f"\nDispatch overhead p50: **{(median_ms(dispatched) - median_ms(direct)) * 1000:.1f} µs** "
        "per tool call.",
    ]
    body = "\n".join(lines) + "\n"
    print(body)
    if not args.quick:
        write_section("agents", "Agents (PostgreSQL)", body, "python benchmarks/agents.py")


if __name__ == "__main__":
    main()
