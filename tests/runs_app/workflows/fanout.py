"""Our extensions: named workflows, routers taking ctx, and a fan-out meeting at a join step."""

from __future__ import annotations

from runs_app.authoring import EffectClass, router, step
from sessions_app.workflow import Workflow


class ResearchFanOut(Workflow):
    """Plan, research two angles in parallel, merge them, and loop until the review is happy."""

    name = "research-fanout"
    description = "Research a topic from two angles and merge the findings"

    @step(entry=True, successors=("dispatch",), effects="read_only")
    def plan(self, state, ctx):
        return {**state, "round": state.get("round", 0) + 1}

    @router(successors=("optimist", "skeptic", "finish"))
    def dispatch(self, state, ctx):
        return ["optimist", "skeptic"] if state["round"] <= 2 else "finish"

    @step(successors=("cite",), effects=EffectClass.IDEMPOTENT)
    def optimist(self, state, ctx):
        return {**state, "view": "up"}

    @step(successors=("merge",), effects=EffectClass.READ_ONLY)
    def cite(self, state, ctx):
        return state

    @step(successors=("merge",))
    def skeptic(self, state, ctx):
        return {**state, "view": "down"}

    @step(join=True, successors=("review",), effects=EffectClass.NONE)
    def merge(self, state, ctx):
        return state

    @router(successors=("plan", "finish"))
    def review(self, state, ctx):
        return "plan" if state["round"] < 2 else "finish"

    @step
    def finish(self, state, ctx):
        return state
