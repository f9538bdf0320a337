"""11. The quickstart's multi-agent research team, a durable workflow.

A planner reads the question; the run fans out into two specialist branches that run in
parallel (each an agent with tools in its own sandbox, each on a fork of the session); their
sessions are merged at the join; a reviewer drafts the report; an operator approves it through
an interrupt; the approved report is published through a recorded effect (at most once).

Offline on the scripted provider; with ``OPENAI_API_KEY`` set, the same agents use the model
(``OPENAI_DEFAULT_MODEL``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from openrath_project import flow

QUESTION = "Should we launch our product in Europe this year?"

CORPUS = {
    "market": [
        "European SaaS spending grew 14% last year.",
        "Three direct competitors already sell in Germany and France.",
    ],
    "technology": [
        "Our stack runs on PostgreSQL and can be hosted in the EU region.",
        "GDPR requires a data processing agreement and EU data residency options.",
    ],
}

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "planner": [
        {
            "text": "Plan: (1) size the European market, (2) check the technical and "
            "legal readiness, (3) weigh both in one report."
        }
    ],
    "market": [
        {"tool_calls": [{"name": "search_corpus", "arguments": {"topic": "market"}}]},
        {
            "tool_calls": [
                {
                    "name": "write_file",
                    "arguments": {
                        "path": "notes.md",
                        "content": "Market: +14% spend; 3 competitors in DE/FR.\n",
                    },
                }
            ]
        },
        {"text": "Market: demand is growing 14% a year, but three competitors are established."},
    ],
    "technology": [
        {"tool_calls": [{"name": "search_corpus", "arguments": {"topic": "technology"}}]},
        {
            "tool_calls": [
                {
                    "name": "write_file",
                    "arguments": {
                        "path": "notes.md",
                        "content": "Tech: EU hosting ready; GDPR DPA needed.\n",
                    },
                }
            ]
        },
        {"text": "Technology: we can host in the EU; a GDPR data processing agreement is needed."},
    ],
    "reviewer": [
        {
            "text": "Report: launch in Europe in Q3. Demand is growing and we can host "
            "in the EU; sign a GDPR DPA first and differentiate from the three "
            "incumbents."
        }
    ],
}


def _provider(role: str) -> Any:
    if os.environ.get("OPENAI_API_KEY"):
        return flow.Provider("openai")
    return flow.Provider("scripted", fixture=SCRIPTS[role])


@flow.tool
def search_corpus(topic: str) -> dict[str, Any]:
    """Search the team's offline research notes.

    Args:
        topic: "market" or "technology".
    """
    return {"topic": topic, "facts": CORPUS.get(topic, [])}


def _sandbox_tools() -> list[Any]:
    from sessions_app.tools import BUILTIN_TOOLS

    return [t for t in BUILTIN_TOOLS if t.name in ("read_file", "write_file")]


def publish_report(run_id: str, report: str, idempotency_key: str = "") -> dict[str, Any]:
    """The side effect: write the approved report where people read it."""
    from django.conf import settings

    folder = Path(settings.DATA_DIR) / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{run_id}.md"
    path.write_text(f"# Research report\n\n{report}\n")
    return {"path": str(path), "bytes": path.stat().st_size}


class ResearchTeam(flow.Workflow):
    name = "research_team"
    description = (
        "A planner splits the question, two specialists research it in parallel with tools in "
        "their own sandboxes, a reviewer drafts the report, an operator approves it, and the "
        "report is published once."
    )

    @flow.step(entry=True, successors=("split",), effects="none")
    def plan(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        planner = flow.Agent(
            "You plan research. Split the question into parts.",
            _provider("planner"),
            name="planner",
        )
        planner(ctx.session)
        return {**state, "plan": ctx.session.text()}

    @flow.router(successors=("market", "technology"))
    def split(self, state: dict[str, Any], ctx: Any) -> list[str]:
        return ["market", "technology"]

    def _specialist(self, state: dict[str, Any], ctx: Any, topic: str) -> dict[str, Any]:
        from django.conf import settings

        workspace = Path(settings.DATA_DIR) / "workspaces" / str(ctx.run_id) / topic
        ctx.session.to("local", spec=str(workspace))
        analyst = flow.Agent(
            f"You are the {topic} analyst. Search the notes, keep your own notes in the "
            "workspace, then answer in one sentence.",
            _provider(topic),
            tools=[search_corpus, *_sandbox_tools()],
            name=f"{topic}-analyst",
        )
        analyst(ctx.session)
        return {**state, "finding": ctx.session.text()}

    @flow.step(successors=("merge",), effects="idempotent")
    def market(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return self._specialist(state, ctx, "market")

    @flow.step(successors=("merge",), effects="idempotent")
    def technology(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return self._specialist(state, ctx, "technology")

    @flow.step(join=True, successors=("draft",), effects="none")
    def merge(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        findings = {b["branch"]: b["state"]["finding"] for b in state["branches"]}
        return {"plan": state["plan"], "findings": findings}

    @flow.step(successors=("approve",), effects="none")
    def draft(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        reviewer = flow.Agent(
            "You review the findings and write a short report.",
            _provider("reviewer"),
            name="reviewer",
        )
        reviewer(ctx.session)
        return {**state, "report": ctx.session.text()}

    @flow.step(successors=("publish",), effects="none")
    def approve(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        decision = ctx.interrupt(
            "approval",
            {
                "title": "Publish the research report?",
                "report": state["report"],
                "findings": state["findings"],
            },
            schema={"type": "object", "properties": {"note": {"type": "string"}}},
        )
        note = (decision.response or {}).get("note", "") if decision.response else ""
        return {**state, "approved_by": decision.resolved_by, "note": note}

    @flow.step(effects="non_idempotent")
    def publish(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        receipt = ctx.effect("publish-report", publish_report, str(ctx.run_id), state["report"])
        return {**state, "published": receipt}


def main() -> dict[str, Any]:
    """Run the whole demo in this process, approving it as ``user:example``."""
    from openrath_project.examples._setup import django_ready, example_project

    django_ready()
    from runs_app import services
    from runs_app.executor import run_one
    from runs_app.interrupts import interrupt_resolve
    from runs_app.models import Interrupt, Run
    from runs_app.registry import WorkflowRegistry

    registry = WorkflowRegistry()
    entry = registry.register(ResearchTeam)
    run, _ = services.run_create(project=example_project(), workflow=entry, user_message=QUESTION)

    def drain() -> None:
        while run_one("example-worker", registry=registry) is not None:
            pass

    drain()
    interrupt = Interrupt.objects.get(run_id=run.id, status="pending")
    interrupt_resolve(
        interrupt=interrupt,
        decision="approve",
        response={"note": "ship it"},
        request_digest=interrupt.request_digest,
        actor="user:example",
    )
    drain()
    done = Run.objects.get(id=run.id)
    print(done.status, (done.output or {}).get("published"))
    return {
        "run": str(done.id),
        "status": done.status,
        "output": done.output,
        "branches": sorted(Run.objects.filter(parent=done).values_list("branch", flat=True)),
    }


if __name__ == "__main__":
    main()
