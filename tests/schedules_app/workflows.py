"""Workflows the schedule tests start."""

from __future__ import annotations

from openrath_project import flow

TALLY_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0}},
    "required": ["n"],
}


class Tally(flow.Workflow):
    """One step: adds one to ``n`` (the input must carry it)."""

    name = "sched-tally"
    input_schema = TALLY_SCHEMA

    @flow.step(entry=True, effects="none")
    def add(self, state, ctx):
        return {**state, "n": state["n"] + 1}
