"""Workflows the replay tests record and replay: an agent step with a tool call, an effect
step, and a changed version of the linear workflow (the same name, one step's code changed).

The agent's provider and the effect's function are looked up at call time from module
globals, so a test can swap them for ones that fail if called before it replays."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openrath_project import flow
from sessions_app.providers.base import DeltaCallback, ModelTurn, Provider

#: Every call of a tool or an effect function, in order (what a replay must not add to).
CALLS: list[str] = []


class FailIfCalled(Provider):
    """A provider a replay must never call. It names the scripted provider's kind and model, as
    the original's did: a replay checks what the model is asked, provider and model included."""

    kind = "scripted"
    model = "scripted-1"

    def __init__(self) -> None:
        self.calls = 0

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelTurn:
        self.calls += 1
        raise AssertionError("a replay called the model provider")


def scripted() -> Provider:
    return flow.Provider(
        "scripted",
        fixture=[
            {
                "text": "Let me look it up.",
                "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"sku": "A-1"}}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 6},
            },
            {"text": "A-1 costs 12.", "usage": {"prompt_tokens": 30, "completion_tokens": 4}},
        ],
    )


#: What the agent step builds its provider with (a test swaps it).
PROVIDER: dict[str, Callable[[], Provider]] = {"make": scripted}


@flow.tool
def lookup(sku: str) -> dict[str, Any]:
    """Look a product's price up."""
    CALLS.append(f"lookup:{sku}")
    return {"sku": sku, "price": 12}


def charge(amount: int, *, idempotency_key: str = "") -> dict[str, Any]:
    CALLS.append(f"charge:{amount}")
    return {"charged": amount, "receipt": f"r-{amount}"}


class AgentQuote(flow.Workflow):
    name = "replay_agent"

    @flow.step(entry=True, successors=("bill",), effects="none")
    def quote(self, state, ctx):
        agent = flow.Agent("You quote prices.", PROVIDER["make"](), tools=[lookup], name="quoter")
        agent(ctx.session)
        answer = ctx.session.chunks[-1].content["text"]
        return {**state, "answer": answer}

    @flow.step(effects="non_idempotent")
    def bill(self, state, ctx):
        receipt = ctx.effect("charge", charge, state["amount"])
        return {**state, "receipt": receipt["receipt"]}


class LinearChanged(flow.Workflow):
    """``durable.Linear`` after a code change: step ``two`` appends and records another thing."""

    name = "linear"

    @flow.step(entry=True, successors=("two",), effects="none")
    def one(self, state, ctx):
        ctx.session.append(f"one for {state.get('who', 'nobody')}", role="assistant")
        return {**state, "steps": ["one"]}

    @flow.step(successors=("three",), effects="none")
    def two(self, state, ctx):
        ctx.session.append("two, changed", role="assistant")
        return {**state, "steps": [*state["steps"], "2"]}

    @flow.step(effects="none")
    def three(self, state, ctx):
        ctx.session.append("three", role="assistant")
        return {**state, "steps": [*state["steps"], "three"], "done": True}


class AgentQuoteMoreCalls(flow.Workflow):
    """``AgentQuote`` after a change that makes the agent call the model once more."""

    name = "replay_agent"

    @flow.step(entry=True, successors=("bill",), effects="none")
    def quote(self, state, ctx):
        agent = flow.Agent("You quote prices.", PROVIDER["make"](), tools=[lookup], name="quoter")
        agent(ctx.session)
        agent(ctx.session)
        return {**state, "answer": ctx.session.chunks[-1].content["text"]}

    @flow.step(effects="non_idempotent")
    def bill(self, state, ctx):
        receipt = ctx.effect("charge", charge, state["amount"])
        return {**state, "receipt": receipt["receipt"]}


class AgentQuoteBillsMore(flow.Workflow):
    """``AgentQuote`` after a change that charges another amount (another effect request)."""

    name = "replay_agent"

    @flow.step(entry=True, successors=("bill",), effects="none")
    def quote(self, state, ctx):
        agent = flow.Agent("You quote prices.", PROVIDER["make"](), tools=[lookup], name="quoter")
        agent(ctx.session)
        return {**state, "answer": ctx.session.chunks[-1].content["text"]}

    @flow.step(effects="non_idempotent")
    def bill(self, state, ctx):
        receipt = ctx.effect("charge", charge, state["amount"] + 1)
        return {**state, "receipt": receipt["receipt"]}


class Billing(flow.Workflow):
    description = "Questions about invoices and payments."

    def forward(self, session):
        return session


class Support(flow.Workflow):
    description = "Questions about using the product."

    def forward(self, session):
        return session


#: What the selector step builds its provider with (a test swaps it).
SELECTOR_PROVIDER: dict[str, Callable[[], Provider]] = {
    "make": lambda: flow.Provider("scripted", fixture=[{"text": "0"}])
}


class Triage(flow.Workflow):
    """A step that asks a model-backed selector which team takes the question."""

    name = "replay_selector"

    @flow.step(entry=True, effects="none")
    def triage(self, state, ctx):
        selector = flow.Selector([Billing(), Support()], SELECTOR_PROVIDER["make"](), name="triage")
        chosen = selector(ctx.session)
        return {**state, "team": type(chosen).__name__}


class AgentQuoteNewEffect(flow.Workflow):
    """``AgentQuote`` after a change that records its charge under another key."""

    name = "replay_agent"

    @flow.step(entry=True, successors=("bill",), effects="none")
    def quote(self, state, ctx):
        agent = flow.Agent("You quote prices.", PROVIDER["make"](), tools=[lookup], name="quoter")
        agent(ctx.session)
        return {**state, "answer": ctx.session.chunks[-1].content["text"]}

    @flow.step(effects="non_idempotent")
    def bill(self, state, ctx):
        receipt = ctx.effect("charge-v2", charge, state["amount"])
        return {**state, "receipt": receipt["receipt"]}


class ParallelChanged(flow.Workflow):
    """``durable.Parallel`` after a change to its ``right`` branch."""

    name = "parallel"

    @flow.step(entry=True, successors=("split",), effects="none")
    def plan(self, state, ctx):
        ctx.session.append("plan: research both", role="assistant")
        return {**state, "planned": True}

    @flow.router(successors=("left", "right"))
    def split(self, state, ctx):
        return ["left", "right"]

    @flow.step(successors=("merge",), effects="none")
    def left(self, state, ctx):
        ctx.session.append("left found A", role="assistant")
        return {**state, "found": "A"}

    @flow.step(successors=("merge",), effects="none")
    def right(self, state, ctx):
        ctx.session.append("right found B", role="assistant")
        return {**state, "found": "C"}

    @flow.step(join=True, effects="none")
    def merge(self, state, ctx):
        found = sorted(b["state"]["found"] for b in state["branches"])
        texts = [c.text for c in ctx.session.chunks]
        return {"found": found, "planned": state["planned"], "texts": texts}


class FlakyFixed(flow.Workflow):
    """``durable.Flaky`` after a fix: its step no longer fails."""

    name = "flaky"

    @flow.step(
        entry=True,
        effects="idempotent",
        retry=flow.RetryPolicy(max_attempts=3, base_seconds=0.05, max_seconds=0.05),
    )
    def call(self, state, ctx):
        return {**state, "attempt": ctx.attempt}


@flow.tool(name="lookup", description="Look a product's price up, in cents.")
def lookup_in_cents(sku: str) -> dict[str, Any]:
    CALLS.append(f"lookup-cents:{sku}")
    return {"sku": sku, "price": 1200}


def _bill(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    receipt = ctx.effect("charge", charge, state["amount"])
    return {**state, "receipt": receipt["receipt"]}


class AgentQuotePromptChanged(flow.Workflow):
    """``AgentQuote`` after a prompt change only: the agent (same name, tools and provider) is
    told something else, so its model is asked another request."""

    name = "replay_agent"

    @flow.step(entry=True, successors=("bill",), effects="none")
    def quote(self, state, ctx):
        agent = flow.Agent(
            "You quote prices, in euros.", PROVIDER["make"](), tools=[lookup], name="quoter"
        )
        agent(ctx.session)
        return {**state, "answer": ctx.session.chunks[-1].content["text"]}

    @flow.step(effects="non_idempotent")
    def bill(self, state, ctx):
        return _bill(state, ctx)


class AgentQuoteToolChanged(flow.Workflow):
    """``AgentQuote`` after a tool change only: ``lookup`` is described otherwise (another
    schema sent to the model)."""

    name = "replay_agent"

    @flow.step(entry=True, successors=("bill",), effects="none")
    def quote(self, state, ctx):
        agent = flow.Agent(
            "You quote prices.", PROVIDER["make"](), tools=[lookup_in_cents], name="quoter"
        )
        agent(ctx.session)
        return {**state, "answer": ctx.session.chunks[-1].content["text"]}

    @flow.step(effects="non_idempotent")
    def bill(self, state, ctx):
        return _bill(state, ctx)


class AgentQuoteModelChanged(flow.Workflow):
    """``AgentQuote`` after a switch to another model of the same provider."""

    name = "replay_agent"

    @flow.step(entry=True, successors=("bill",), effects="none")
    def quote(self, state, ctx):
        provider = flow.Provider("scripted", model="scripted-2", fixture=[{"text": "unused"}])
        agent = flow.Agent("You quote prices.", provider, tools=[lookup], name="quoter")
        agent(ctx.session)
        return {**state, "answer": ctx.session.chunks[-1].content["text"]}

    @flow.step(effects="non_idempotent")
    def bill(self, state, ctx):
        return _bill(state, ctx)
