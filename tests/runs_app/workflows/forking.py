"""Workflows the fork and ancestor-effect tests run (written as users write them)."""

from __future__ import annotations

from effects_app.services import reuse_in_forks
from openrath_project import flow

#: Every call of a world-changing function, in order: ``(function, argument)``.
WORLD: list[tuple[str, object]] = []


def _step(state: dict, ctx, name: str) -> dict:
    ctx.session.append(f"{name} at {len(state.get('steps', []))}", role="assistant")
    return {**state, "steps": [*state.get("steps", []), name]}


class ForkLinear(flow.Workflow):
    name = "fork_linear"

    @flow.step(entry=True, successors=("b",), effects="none")
    def a(self, state, ctx):
        return _step(state, ctx, "a")

    @flow.step(successors=("c",), effects="none")
    def b(self, state, ctx):
        return _step(state, ctx, "b")

    @flow.step(successors=("d",), effects="none")
    def c(self, state, ctx):
        return _step(state, ctx, "c")

    @flow.step(effects="none")
    def d(self, state, ctx):
        return {**_step(state, ctx, "d"), "done": True}


class ForkRouted(flow.Workflow):
    name = "fork_routed"

    @flow.step(entry=True, successors=("decide",), effects="none")
    def start(self, state, ctx):
        return _step(state, ctx, "start")

    @flow.router(successors=("small", "large"))
    def decide(self, state):
        return "large" if state["amount"] > 100 else "small"

    @flow.step(successors=("finish",), effects="none")
    def small(self, state, ctx):
        return _step(state, ctx, "small")

    @flow.step(successors=("finish",), effects="none")
    def large(self, state, ctx):
        return _step(state, ctx, "large")

    @flow.step(effects="none")
    def finish(self, state, ctx):
        return _step(state, ctx, "finish")


class ForkFanout(flow.Workflow):
    name = "fork_fanout"

    @flow.step(entry=True, successors=("split",), effects="none")
    def plan(self, state, ctx):
        return _step(state, ctx, "plan")

    @flow.router(successors=("left", "right"))
    def split(self, state, ctx):
        return ["left", "right"]

    @flow.step(successors=("merge",), effects="none")
    def left(self, state, ctx):
        return {**_step(state, ctx, "left"), "found": "L"}

    @flow.step(successors=("merge",), effects="none")
    def right(self, state, ctx):
        return {**_step(state, ctx, "right"), "found": "R"}

    @flow.step(join=True, successors=("after",), effects="none")
    def merge(self, state, ctx):
        found = sorted(b["state"]["found"] for b in state["branches"])
        return {"steps": [*state["steps"], "merge"], "found": found}

    @flow.step(effects="none")
    def after(self, state, ctx):
        return _step(state, ctx, "after")


def issue_refund(order: str, amount: int, idempotency_key: str = "") -> dict:
    """A refund: not idempotent unless the caller says so (the payment system may not dedupe)."""
    WORLD.append(("issue_refund", amount))
    return {"refunded": amount, "order": order, "key": idempotency_key[:8]}


@reuse_in_forks
def refund_reusable(order: str, amount: int, idempotency_key: str = "") -> dict:
    """The same refund, marked safe to reuse in forks (idempotent by its key)."""
    WORLD.append(("refund_reusable", amount))
    return {"refunded": amount, "order": order, "key": idempotency_key[:8]}


class Refunds(flow.Workflow):
    """Four steps; the refund is issued after step 3 (checkpoint 3), in step ``refund``.

    ``state["mode"]``: ``plain`` (non-idempotent), ``idempotent`` (idempotent, not opted in),
    ``reusable`` (idempotent and opted in)."""

    name = "refunds"

    @flow.step(entry=True, successors=("look",), effects="none")
    def intake(self, state, ctx):
        return _step(state, ctx, "intake")

    @flow.step(successors=("decide",))
    def look(self, state, ctx):
        receipt = ctx.effect("lookup", lookup_order, state["order"], idempotent=True)
        return {**_step(state, ctx, "look"), "lookup": receipt}

    @flow.step(successors=("refund",), effects="none")
    def decide(self, state, ctx):
        return _step(state, ctx, "decide")

    @flow.step(successors=("close",))
    def refund(self, state, ctx):
        mode = state.get("mode", "plain")
        fn = refund_reusable if mode == "reusable" else issue_refund
        receipt = ctx.effect(
            "refund", fn, state["order"], state["amount"], idempotent=mode != "plain"
        )
        return {**_step(state, ctx, "refund"), "receipt": receipt}

    @flow.step(effects="none")
    def close(self, state, ctx):
        return {**_step(state, ctx, "close"), "closed": True}


def lookup_order(order: str) -> dict:
    WORLD.append(("lookup_order", order))
    return {"order": order, "found": True}


def notify(who: str) -> dict:
    WORLD.append(("notify", who))
    return {"notified": who}


class Looping(flow.Workflow):
    """``ask`` runs twice (checkpoints 0 and 2): its effect is recorded once, at checkpoint 0."""

    name = "looping"

    @flow.step(entry=True, successors=("again",))
    def ask(self, state, ctx):
        receipt = ctx.effect("notify", notify, state["who"])
        return {**state, "rounds": state.get("rounds", 0) + 1, "receipt": receipt}

    @flow.router(successors=("ask", "end"))
    def again(self, state):
        return "ask" if state["rounds"] < 2 else "end"

    @flow.step(effects="none")
    def end(self, state, ctx):
        return {**state, "ended": True}
