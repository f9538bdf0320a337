"""The workflow of the soak test (``benchmarks/soak.py``): a draft, a person's approval (an
interrupt resolved over the HTTP API by the soak's scripted operator), an idempotent effect."""

from __future__ import annotations

from typing import Any

from openrath_project import flow


def record_publication(draft: str, idempotency_key: str = "") -> dict[str, Any]:
    """The effect: nothing leaves the machine; the ledger records the receipt."""
    return {"published": draft, "receipt": idempotency_key[:16]}


class SoakReview(flow.Workflow):
    name = "soak_review"
    description = "Draft, wait for an approval, publish through the effect ledger."

    @flow.step(entry=True, successors=("review",), effects="none")
    def draft(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        text = f"draft {state.get('n', 0)}"
        ctx.session.append(text, role="assistant", agent="writer")
        return {**state, "draft": text}

    @flow.step(successors=("publish",), effects="none")
    def review(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        decision = ctx.interrupt(
            "approval",
            {"draft": state["draft"]},
            schema={"type": "object", "properties": {"note": {"type": "string"}}},
            title="Publish this draft?",
        )
        note = (decision.response or {}).get("note", "")
        return {**state, "approved_by": decision.resolved_by, "note": note}

    @flow.step(effects="idempotent")
    def publish(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        receipt = ctx.effect("publish", record_publication, state["draft"], idempotent=True)
        ctx.session.append(f"published {state['draft']}", role="assistant", agent="writer")
        return {**state, "receipt": receipt}
