"""10. A durable run with an interrupt and an effect: the run waits for a person's approval
(its lease released), then publishes through the effect ledger, at most once."""

from __future__ import annotations

from typing import Any

from openrath_project.examples._setup import django_ready, example_project

SENT: list[str] = []


def send_newsletter(subject: str, idempotency_key: str = "") -> dict[str, Any]:
    """The side effect (in real life: an email API that deduplicates by idempotency key)."""
    SENT.append(subject)
    return {"sent": subject, "key": idempotency_key[:12]}


def build_workflow() -> type:
    from openrath_project import flow

    class Newsletter(flow.Workflow):
        name = "example_newsletter"
        description = "Draft a newsletter, get it approved, send it once."

        @flow.step(entry=True, successors=("approve",), effects="none")
        def draft(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            ctx.session.append(f"Draft: {state['subject']}", role="assistant", agent="writer")
            return {**state, "draft": f"Draft: {state['subject']}"}

        @flow.step(successors=("send",), effects="none")
        def approve(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            decision = ctx.interrupt(
                "approval",
                {"title": "Send this newsletter?", "draft": state["draft"]},
                schema={"type": "object", "properties": {"note": {"type": "string"}}},
            )
            return {**state, "approved_by": decision.resolved_by}

        @flow.step(effects="non_idempotent")
        def send(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            receipt = ctx.effect("send", send_newsletter, state["subject"])
            return {**state, "receipt": receipt}

    return Newsletter


def main() -> dict[str, Any]:
    django_ready()
    from runs_app import services
    from runs_app.executor import run_one
    from runs_app.interrupts import interrupt_resolve
    from runs_app.models import Interrupt, Run
    from runs_app.registry import WorkflowRegistry

    registry = WorkflowRegistry()
    entry = registry.register(build_workflow())
    run, _ = services.run_create(
        project=example_project(),
        workflow=entry,
        state={"subject": "March launch"},
        user_message="newsletter",
    )
    while run_one("example-worker", registry=registry, run_id=run.id) is not None:
        pass
    waiting = Run.objects.get(id=run.id)
    interrupt = Interrupt.objects.get(run=waiting, status="pending")
    print(waiting.status, "->", interrupt.title)
    interrupt_resolve(
        interrupt=interrupt,
        decision="approve",
        response={"note": "go"},
        request_digest=interrupt.request_digest,
        actor="user:example",
    )
    while run_one("example-worker", registry=registry, run_id=run.id) is not None:
        pass
    done = Run.objects.get(id=run.id)
    print(done.status, done.output)
    return {
        "waited": waiting.status,
        "status": done.status,
        "output": done.output,
        "sent": list(SENT),
    }


if __name__ == "__main__":
    main()
