"""Workflows the console tests drive on the test thread: an approval with a typed response
schema, and an effect that can be made ambiguous (the worker 'dies' while it runs)."""

from __future__ import annotations

from openrath_project import flow

SENT: list[str] = []
CRASH = {"send": False}

APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {
        "note": {"type": "string", "title": "Note", "description": "What to tell the team"},
        "priority": {"type": "integer"},
        "channel": {"type": "string", "enum": ["email", "chat"]},
    },
    "required": ["note"],
}


class ConsoleApproval(flow.Workflow):
    name = "console_approval"

    @flow.step(entry=True, successors=("publish",), effects="none")
    def review(self, state, ctx):
        ctx.session.append("Drafted release notes for 1.2", role="assistant", agent="writer")
        try:
            decision = ctx.interrupt(
                "approval",
                {"title": "Ship release 1.2?", "release": "1.2", "changes": ["a", "b"]},
                schema=state.get("schema", APPROVAL_SCHEMA),
            )
        except flow.InterruptRejected as rejected:
            return {**state, "approved": False, "reason": rejected.decision.reason}
        return {**state, "approved": True, "response": decision.response}

    @flow.step(effects="none")
    def publish(self, state, ctx):
        return {**state, "published": state["approved"]}


def send_mail(to: str, idempotency_key: str = "") -> dict:
    SENT.append(to)
    if CRASH["send"]:
        CRASH["send"] = False
        raise KeyboardInterrupt("simulated worker death during the effect")
    return {"sent": to}


class ConsoleEffect(flow.Workflow):
    name = "console_effect"

    @flow.step(entry=True, effects="non_idempotent")
    def send(self, state, ctx):
        receipt = ctx.effect("send", send_mail, state["to"])
        return {**state, "receipt": receipt}


def publish_post(title: str, idempotency_key: str = "") -> dict:
    SENT.append(title)
    return {"url": "https://blog.example/1", "title": title}


class ConsolePublish(flow.Workflow):
    """Asks before publishing, naming in its request the effect an approval lets happen."""

    name = "console_publish"

    @flow.step(entry=True, successors=("publish",), effects="none")
    def draft(self, state, ctx):
        ctx.session.append(state.get("question", "Write the post"), role="user")
        ctx.interrupt(
            "approval",
            {
                "title": "Publish the post?",
                "effects": [{"key": "publish_post", "request": {"title": state["title"]}}],
            },
            timeout_seconds=3600,
        )
        return state

    @flow.step(effects="non_idempotent")
    def publish(self, state, ctx):
        return {**state, "receipt": ctx.effect("publish_post", publish_post, state["title"])}
