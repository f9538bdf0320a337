"""Workflows the browser tests run in a real server process (its embedded worker threads)."""

from __future__ import annotations

import time

from openrath_project import flow
from sessions_app import streaming


class BrowserApproval(flow.Workflow):
    """Asks for approval, then takes a moment to 'deploy', then reports in the session."""

    name = "browser_approval"

    @flow.step(entry=True, successors=("deploy",), effects="none")
    def review(self, state, ctx):
        decision = ctx.interrupt(
            "approval",
            {"title": "Deploy 2.0 to production?", "version": "2.0", "regions": ["eu", "us"]},
            schema={
                "type": "object",
                "properties": {"note": {"type": "string", "title": "Note"}},
                "required": ["note"],
            },
        )
        return {**state, "note": (decision.response or {}).get("note")}

    @flow.step(successors=("announce",), effects="none")
    def deploy(self, state, ctx):
        time.sleep(float(state.get("deploy_seconds", 1.0)))
        return {**state, "deployed": True}

    @flow.step(effects="none")
    def announce(self, state, ctx):
        ctx.session.append(f"Deployed 2.0: {state['note']}", role="assistant", agent="deployer")
        return {**state, "announced": True}


class BrowserStream(flow.Workflow):
    """Waits for a go, then writes chunks one by one over a few seconds (with token deltas)."""

    name = "browser_stream"

    @flow.step(entry=True, successors=("stream",), effects="none")
    def gate(self, state, ctx):
        ctx.interrupt("input", {"title": "Start streaming?"})
        return state

    @flow.step(effects="none")
    def stream(self, state, ctx):
        for index in range(int(state.get("chunks", 5))):
            text = f"line {index + 1}"
            for part in (text[:3], text[3:]):
                streaming.token_delta(ctx.session.id, agent="narrator", delta=part, turn=str(index))
                time.sleep(0.15)
            ctx.session.append(text, role="assistant", agent="narrator")
            time.sleep(float(state.get("pause", 0.4)))
        return {**state, "streamed": True}
