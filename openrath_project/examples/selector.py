"""9. Selector: a model picks a workflow; the decision is recorded in the session and can be
replayed without asking the model again."""

from __future__ import annotations

from typing import Any

from openrath_project.examples._setup import django_ready, example_project, provider


def main() -> dict[str, Any]:
    django_ready()
    from openrath_project import flow

    class SmallTalk(flow.Workflow):
        name = "small_talk"
        description = "Chat about anything light."

        def forward(self, session: Any) -> Any:
            session.append("Nice weather today!", role="assistant")
            return session

    class Billing(flow.Workflow):
        name = "billing"
        description = "Questions about invoices and payments."

        def forward(self, session: Any) -> Any:
            session.append("Your last invoice was paid on the 1st.", role="assistant")
            return session

    router = flow.Selector([SmallTalk(), Billing()], provider([{"text": "1"}]), name="router")
    session = flow.Session.from_user_message("Was my invoice paid?", project=example_project())
    chosen = router(session)
    chosen(session)
    decision = next(c.content for c in session.chunks if c.kind == "event")
    replay = flow.Selector([SmallTalk(), Billing()], provider([]), name="router", replay=session)
    replayed = replay(flow.Session.from_user_message("again", project=example_project()))
    print(decision["choice"], type(replayed).__name__)
    return {
        "choice": decision["choice"],
        "fallback": decision["fallback"],
        "replayed": replayed.name,
        "answer": session.text(),
    }


if __name__ == "__main__":
    main()
