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


class BrowserFanOut(flow.Workflow):
    """Plans, researches two angles in parallel branches (each its own agent), and reviews the
    merged findings: four agents across the lineage of one run (the console's graphs)."""

    name = "browser_fanout"

    @flow.step(entry=True, successors=("split",), effects="none")
    def plan(self, state, ctx):
        ctx.session.append("Plan: look at the market and the technology", agent="planner")
        return {**state, "planned": True}

    @flow.router(successors=("market", "technology"))
    def split(self, state, ctx):
        return ["market", "technology"]

    @flow.step(successors=("review",), effects="none")
    def market(self, state, ctx):
        for line in ("Market: three competitors", "Market: demand grows"):
            ctx.session.append(line, role="assistant", agent="market-analyst")
        return {**state, "market": "up"}

    @flow.step(successors=("review",), effects="none")
    def technology(self, state, ctx):
        for line in ("Technology: mature stack", "Technology: one risky part"):
            ctx.session.append(line, role="assistant", agent="technology-analyst")
        return {**state, "technology": "ready"}

    @flow.step(join=True, effects="none")
    def review(self, state, ctx):
        ctx.session.append("Review: go ahead", role="assistant", agent="reviewer")
        return {**state, "reviewed": [b["branch"] for b in state["branches"]]}


PUBLISHED: list[str] = []


def publish_post(title: str, idempotency_key: str = "") -> dict:
    PUBLISHED.append(title)
    return {"url": f"https://blog.example/{len(PUBLISHED)}", "title": title}


class BrowserPublish(flow.Workflow):
    """Drafts a post, asks for approval (naming the effect it allows), then publishes it once,
    through a recorded effect."""

    name = "browser_publish"

    @flow.step(entry=True, successors=("publish",), effects="none")
    def draft(self, state, ctx):
        title = state.get("title", "Quarterly results")
        ctx.session.append(f"Draft: {title} are in", role="assistant", agent="writer")
        ctx.interrupt(
            "approval",
            {
                "title": f"Publish “{title}”?",
                "effects": [{"key": "publish_post", "request": {"title": title}}],
            },
        )
        return {**state, "title": title}

    @flow.step(effects="non_idempotent")
    def publish(self, state, ctx):
        receipt = ctx.effect("publish_post", publish_post, state["title"])
        return {**state, "receipt": receipt}


class BrowserFlaky(flow.Workflow):
    """Its first attempt at ``fetch`` fails; the retry waits on a durable timer, then works."""

    name = "browser_flaky"

    @flow.step(
        entry=True,
        successors=("store",),
        effects="none",
        retry=flow.RetryPolicy(max_attempts=2, base_seconds=1.0, max_seconds=1.0),
    )
    def fetch(self, state, ctx):
        if ctx.attempt == 1:
            raise ConnectionError("the feed did not answer")
        return {**state, "fetched_on": ctx.attempt}

    @flow.step(effects="none")
    def store(self, state, ctx):
        return {**state, "stored": True}
