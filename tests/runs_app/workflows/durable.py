"""Durable workflows the runtime tests run (written as users write them, with the flow facade)."""

from __future__ import annotations

import time

from openrath_project import flow

CALLS: dict[str, int] = {}


def count(name: str) -> int:
    CALLS[name] = CALLS.get(name, 0) + 1
    return CALLS[name]


class Linear(flow.Workflow):
    name = "linear"
    description = "three steps, each appending one chunk"

    @flow.step(entry=True, successors=("two",), effects="none")
    def one(self, state, ctx):
        count("one")
        ctx.session.append(f"one for {state.get('who', 'nobody')}", role="assistant")
        return {**state, "steps": ["one"]}

    @flow.step(successors=("three",), effects="none")
    def two(self, state, ctx):
        count("two")
        ctx.session.append("two", role="assistant")
        return {**state, "steps": [*state["steps"], "two"]}

    @flow.step(effects="none")
    def three(self, state, ctx):
        count("three")
        ctx.session.append("three", role="assistant")
        return {**state, "steps": [*state["steps"], "three"], "done": True}


class Flaky(flow.Workflow):
    name = "flaky"

    @flow.step(
        entry=True,
        effects="idempotent",
        retry=flow.RetryPolicy(max_attempts=3, base_seconds=0.05, max_seconds=0.05),
    )
    def call(self, state, ctx):
        n = count("flaky")
        if n < state.get("succeed_on", 3):
            raise ConnectionError(f"flaked on attempt {ctx.attempt}")
        return {**state, "attempt": ctx.attempt}


class Routed(flow.Workflow):
    name = "routed"

    @flow.step(entry=True, successors=("decide",), effects="none")
    def start(self, state, ctx):
        return {**state, "seen": 0}

    @flow.router(successors=("small", "large"))
    def decide(self, state):  # OpenRath style: routers take only the state
        return "large" if state["amount"] > 100 else "small"

    @flow.step(effects="none")
    def small(self, state, ctx):
        return {**state, "path": "small"}

    @flow.step(effects="none")
    def large(self, state, ctx):
        return {**state, "path": "large"}


class Parallel(flow.Workflow):
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
        return {**state, "found": "B"}

    @flow.step(join=True, effects="none")
    def merge(self, state, ctx):
        found = sorted(b["state"]["found"] for b in state["branches"])
        texts = [c.text for c in ctx.session.chunks]
        return {"found": found, "planned": state["planned"], "texts": texts}


class Slow(flow.Workflow):
    name = "slow"

    @flow.step(
        entry=True,
        effects="none",
        timeout_seconds=1,
        retry=flow.RetryPolicy(max_attempts=2, base_seconds=0.05, max_seconds=0.05),
    )
    def spin(self, state, ctx):
        count("spin")
        deadline = time.monotonic() + state.get("seconds", 30)
        x = 0
        while time.monotonic() < deadline:  # a synchronous busy loop
            x += 1
        return {**state, "x": x}


class Sleepy(flow.Workflow):
    name = "sleepy"

    @flow.step(entry=True, successors=("after",), effects="none")
    def nap(self, state, ctx):
        count("nap")
        deadline = time.monotonic() + state.get("seconds", 5)
        while time.monotonic() < deadline:
            time.sleep(0.05)
        return {**state, "napped": True}

    @flow.step(effects="none")
    def after(self, state, ctx):
        count("after")
        return {**state, "after": True}


PUBLISHED: list[str] = []
CRASH = {"publish": False}


def publish_report(report: str, idempotency_key: str = "") -> dict:
    """An effect: 'publishes' by appending to a list (and can simulate a crash mid-call)."""
    PUBLISHED.append(report)
    if CRASH["publish"]:
        CRASH["publish"] = False
        raise KeyboardInterrupt("simulated worker death during the effect")
    return {"published": report, "key": idempotency_key[:8]}


class Approval(flow.Workflow):
    name = "approval"

    @flow.step(entry=True, successors=("publish",), effects="none")
    def review(self, state, ctx):
        count("review")
        try:
            decision = ctx.interrupt(
                "approval",
                {"title": "Publish the report?", "report": state["report"]},
                timeout_seconds=state.get("timeout"),
                schema={
                    "type": "object",
                    "properties": {"note": {"type": "string"}},
                    "required": ["note"],
                },
                default=state.get("default"),
            )
        except flow.InterruptRejected as rejected:
            return {**state, "approved": False, "reason": rejected.decision.reason}
        return {
            **state,
            "approved": True,
            "decision": decision.decision,
            "note": (decision.response or {}).get("note"),
        }

    @flow.step(effects="non_idempotent")
    def publish(self, state, ctx):
        if not state["approved"]:
            return state
        receipt = ctx.effect(
            "publish", publish_report, state["report"], idempotent=state.get("idempotent", False)
        )
        return {**state, "receipt": receipt}


class Budgeted(flow.Workflow):
    name = "budgeted"

    @flow.step(entry=True, successors=("second",), effects="none")
    def first(self, state, ctx):
        ctx.session.append(
            "expensive", role="assistant", usage={"prompt_tokens": 600, "completion_tokens": 500}
        )
        return {**state, "first": True}

    @flow.step(effects="none")
    def second(self, state, ctx):
        count("second")
        return {**state, "second": True}


APPENDED: list[str] = []


@flow.tool(writes=True)
def append_line(line: str) -> dict:
    """Append a line to the shared log (a write: inside a run it goes through the ledger).

    Args:
        line: the text to append.
    """
    APPENDED.append(line)
    return {"ok": True, "lines": len(APPENDED)}


class AgentStep(flow.Workflow):
    name = "agent_step"

    @flow.step(
        entry=True,
        effects="idempotent",
        retry=flow.RetryPolicy(max_attempts=2, base_seconds=0.05, max_seconds=0.05),
    )
    def work(self, state, ctx):
        provider = flow.Provider(
            "scripted",
            fixture=[
                {
                    "text": None,
                    "tool_calls": [
                        {"id": "c1", "name": "append_line", "arguments": {"line": "hello"}}
                    ],
                },
                {"text": "done"},
            ],
        )
        agent = flow.Agent("You write lines.", provider, tools=[append_line], name="writer")
        agent(ctx.session)
        if count("agent_step") == 1:
            raise ConnectionError("flaky after the write")
        return {**state, "done": True}


class LargeState(flow.Workflow):
    """State values over the inline limit: stored as artifacts, seen whole by every step."""

    name = "large_state"

    @flow.step(entry=True, successors=("split",), effects="none")
    def write(self, state, ctx):
        return {**state, "doc": "d" * state["size"], "small": 1}

    @flow.router(successors=("left", "right"))
    def split(self, state, ctx):
        assert len(state["doc"]) == state["size"]
        return ["left", "right"]

    @flow.step(successors=("merge",), effects="none")
    def left(self, state, ctx):
        return {**state, "part": ["L" * 1000] * (state["size"] // 1000)}

    @flow.step(successors=("merge",), effects="none")
    def right(self, state, ctx):
        return {**state, "part": ["R" * 1000] * (state["size"] // 1000)}

    @flow.step(join=True, successors=("check",), effects="none")
    def merge(self, state, ctx):
        parts = {b["branch"]: b["state"]["part"][0][0] for b in state["branches"]}
        doc = state["branches"][0]["state"]["doc"]
        return {"doc": doc + "!", "parts": parts, "size": state["branches"][0]["state"]["size"]}

    @flow.step(effects="none")
    def check(self, state, ctx):
        return {**state, "doc_length": len(state["doc"])}


class GrowingList(flow.Workflow):
    """A list in the state grows every step, by ``per_step`` items of ``size`` characters; the
    middle step is not checkpointed, so the checkpoint after it holds two steps' change."""

    name = "growing_list"

    @staticmethod
    def _grown(state, step):
        new = [
            {"step": step, "i": i, "text": "m" * state["size"]} for i in range(state["per_step"])
        ]
        return {**state, "items": state["items"] + new, "last": step}

    @flow.step(entry=True, successors=("quiet",), effects="none")
    def first(self, state, ctx):
        return self._grown(state, "first")

    @flow.step(successors=("third",), effects="none", checkpoint=False)
    def quiet(self, state, ctx):
        state["items"].extend(self._grown(state, "quiet")["items"][len(state["items"]) :])
        return state  # changed in place, as a handler may

    @flow.step(successors=("fourth",), effects="none")
    def third(self, state, ctx):
        return self._grown(state, "third")

    @flow.step(effects="none")
    def fourth(self, state, ctx):
        return self._grown(state, "fourth")


#: A message a step of ``editing_list`` keeps, for a later step to change.
KEPT: dict[str, object] = {}


class EditingList(flow.Workflow):
    """Messages kept in the state and changed in place: appended, edited by index, edited
    through an object kept from an earlier step, removed."""

    name = "editing_list"

    @flow.step(entry=True, successors=("edit",), effects="none")
    def grow(self, state, ctx):
        state["messages"] = state["messages"] + [
            {"role": "user", "content": f"m{n}"} for n in range(state["count"])
        ]
        return state

    @flow.step(successors=("keep",), effects="none")
    def edit(self, state, ctx):
        state["messages"][1]["content"] = "edited in place"
        state["messages"].append({"role": "assistant", "content": "after the edit"})
        # Returns nothing: the run goes on with the state it handed, as changed.

    @flow.step(successors=("use_kept",), effects="none", checkpoint=False)
    def keep(self, state, ctx):
        KEPT["message"] = state["messages"][0]
        return {**state, "messages": [*state["messages"], {"role": "user", "content": "kept"}]}

    @flow.step(successors=("drop",), effects="none")
    def use_kept(self, state, ctx):
        KEPT["message"]["content"] = "changed through the kept object"
        return state

    @flow.step(effects="none")
    def drop(self, state, ctx):
        del state["messages"][2]
        return state
