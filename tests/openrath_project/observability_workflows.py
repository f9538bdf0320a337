"""Workflows of the metrics and log tests: a step that logs, a step that fails once."""

from __future__ import annotations

from openrath_project import flow


class Observed(flow.Workflow):
    name = "observed"

    @flow.step(entry=True, successors=("flaky",), effects="none")
    def first(self, state, ctx):
        ctx.logger.info("working on %s", state.get("topic", "nothing"))
        return {**state, "first": True}

    @flow.step(
        effects="idempotent",
        retry=flow.RetryPolicy(max_attempts=2, base_seconds=0.01, max_seconds=0.01),
    )
    def flaky(self, state, ctx):
        if ctx.attempt == 1:
            raise ConnectionError("flaked once")
        return {**state, "flaky_attempt": ctx.attempt}
