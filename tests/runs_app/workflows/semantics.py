"""Workflows for the execution semantics reconciled with OpenRath 2.0 (timeouts, schemas)."""

from __future__ import annotations

import time

from openrath_project import flow


class Overrun(flow.Workflow):
    """A synchronous step that sleeps ``state["seconds"]`` against a 0.2 s timeout."""

    name = "sem-overrun"

    @flow.step(entry=True, effects="none", timeout_seconds=0.2)
    def nap(self, state, ctx):
        time.sleep(state["seconds"])
        return {**state, "napped": True}


class Quick(flow.Workflow):
    """Well within its timeout: succeeds."""

    name = "sem-quick"

    @flow.step(entry=True, effects="none", timeout_seconds=60)
    def fast(self, state, ctx):
        return {**state, "fast": True}


class Spin(flow.Workflow):
    """A synchronous busy loop far past its timeout: only preemption stops it."""

    name = "sem-spin"

    @flow.step(entry=True, effects="none", timeout_seconds=0.5)
    def spin(self, state, ctx):
        deadline = time.monotonic() + 120
        x = 0
        while time.monotonic() < deadline:
            x += 1
        return {**state, "x": x}


COUNTER_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0}, "label": {"type": "string"}},
    "required": ["n"],
}


class Counter(flow.Workflow):
    """``input_schema`` / ``state_schema`` as OpenRath declares them (class attributes)."""

    name = "sem-counter"
    input_schema = COUNTER_SCHEMA
    state_schema = COUNTER_SCHEMA

    @flow.step(entry=True, successors=("second",), effects="none")
    def first(self, state, ctx):
        return {**state, "n": state["n"] + 1}

    @flow.step(effects="none", checkpoint=False, successors=("third",))
    def second(self, state, ctx):
        if state.get("label") == "break":
            return {**state, "n": "not a number"}
        return {**state, "n": state["n"] + 1}

    @flow.step(effects="none")
    def third(self, state, ctx):
        return {**state, "n": state["n"] + 1}
