"""OpenRath 2.0 durable workflows ported by changing imports only.

Taken from the OpenRath reference examples (order pipeline, refund approval, a loop). The
bodies are as OpenRath users write them: routers take ``(self, state)``, steps
``(self, state, ctx)``. The only edits: the imports, the ``StepContext`` annotation (no such
class here) and ``InterruptKind.APPROVAL``, which is the plain string ``"approval"`` in our API.
"""

from __future__ import annotations

import asyncio

from runs_app.authoring import EffectClass, RetryPolicy, router, step
from sessions_app.workflow import Workflow

FLAKY_CALLS = {"n": 0}


class OrderPipeline(Workflow):
    workflow_version = "3"  # read by the compiler (default "1")

    def __init__(self) -> None:
        super().__init__(description="validate -> price -> route -> (ship | manual_review)")

    @step(entry=True, successors=("price",), effects=EffectClass.NONE)
    def validate(self, state, ctx):
        if not state.get("items"):
            raise ValueError("empty order")
        return {**state, "validated": True}

    @step(
        successors=("route",),
        effects=EffectClass.IDEMPOTENT,
        retry=RetryPolicy(max_attempts=3, base_seconds=0.01, max_seconds=0.05),
    )
    def price(self, state, ctx):
        FLAKY_CALLS["n"] += 1
        if FLAKY_CALLS["n"] < 3:
            raise ConnectionError(f"pricing service flaked (attempt {FLAKY_CALLS['n']})")
        total = sum(i["qty"] * i["unit"] for i in state["items"])
        return {**state, "total": total, "price_attempts": FLAKY_CALLS["n"]}

    @router(successors=("ship", "manual_review"))
    def route(self, state):  # routers receive ONLY state
        return "manual_review" if state["total"] > 100 else "ship"

    @step(effects=EffectClass.NON_IDEMPOTENT)
    def ship(self, state, ctx):
        return {**state, "status": "shipped", "run_id": str(ctx.run_id)}

    @step(effects=EffectClass.READ_ONLY, checkpoint=False)
    def manual_review(self, state, ctx):
        return {**state, "status": "needs_human"}


class RefundWorkflow(Workflow):
    def __init__(self) -> None:
        super().__init__(description="Refund with manager approval")

    @step(entry=True, successors=("approve",), effects=EffectClass.READ_ONLY, timeout_seconds=5)
    async def lookup(self, state, ctx):
        await asyncio.sleep(0)
        return {**state, "customer_tier": "gold"}

    @step(successors=("decide",), effects=EffectClass.NONE)
    def approve(self, state, ctx):
        decision = ctx.interrupt(
            "approval",
            {"question": f"refund {state['amount']}?"},
            timeout_seconds=3600,
        )
        return {
            **state,
            "decision": decision.kind.value,
            "approver": decision.actor_id,
            "note": decision.reason,
        }

    @router(successors=("pay", "notify_rejected"))
    def decide(self, state):
        return "pay" if state["decision"] in ("approve", "edit") else "notify_rejected"

    @step(
        effects=EffectClass.NON_IDEMPOTENT,
        retry=RetryPolicy(max_attempts=2),
        idempotency_key="refund-payment",  # required: non-idempotent + retries
    )
    def pay(self, state, ctx):
        return {**state, "paid": True}

    @step(effects=EffectClass.IDEMPOTENT)
    def notify_rejected(self, state, ctx):
        return {**state, "paid": False}


class CountToThree(Workflow):
    """A loop: a router sends the run back to an earlier step until a condition holds."""

    @step(entry=True, successors=("check",))
    def count(self, state, ctx):
        return {**state, "n": state.get("n", 0) + 1}

    @router(successors=("count", "done"))
    def check(self, state):
        return "count" if state["n"] < 3 else "done"

    @step()
    def done(self, state, ctx):
        return state
