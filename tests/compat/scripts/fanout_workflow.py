"""A durable workflow with two parallel branches, importable by a server and a script alike."""

from openrath_project import flow


class Fanout(flow.Workflow):
    name = "compat_fanout"

    @flow.router(entry=True, successors=("left", "right"))
    def split(self, state, ctx):
        return ["left", "right"]

    @flow.step(successors=("join",))
    def left(self, state, ctx):
        return {**state, "side": "left"}

    @flow.step(successors=("join",))
    def right(self, state, ctx):
        return {**state, "side": "right"}

    @flow.step(join=True)
    def join(self, state, ctx):
        return {"sides": sorted(b["state"]["side"] for b in state["branches"])}
