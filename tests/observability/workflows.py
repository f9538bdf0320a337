"""Workflows of the tracing tests (the demo research team is the other one)."""

from __future__ import annotations

from typing import Any

from openrath_project import flow


class TracedRetry(flow.Workflow):
    """One model call per attempt; the first attempt fails after its call, the second
    succeeds: two sibling step spans, each with its model call."""

    name = "traced_retry"

    @flow.step(
        entry=True,
        effects="none",
        retry=flow.RetryPolicy(max_attempts=2, base_seconds=0.2, max_seconds=0.2),
    )
    def ask(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        flow.Agent("You answer briefly.", flow.Provider("openai"), name="asker")(ctx.session)
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails after its model call")
        return {**state, "answer": ctx.session.text()}


class TracedSteps(flow.Workflow):
    """Two plain steps (what a Celery worker executes in the hand-off test)."""

    name = "traced_steps"

    @flow.step(entry=True, successors=("second",), effects="none")
    def first(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {**state, "first": True}

    @flow.step(effects="none")
    def second(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {**state, "second": True}
