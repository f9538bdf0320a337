"""8. Memory: remember facts, recall them with BM25, and let an agent use them (as untrusted
context, never as instructions)."""

from __future__ import annotations

from typing import Any

from openrath_project.examples._setup import django_ready, example_project, provider


def main() -> dict[str, Any]:
    django_ready()
    from memory_app.services import memory_recall, memory_remember
    from openrath_project import flow

    project = example_project()
    for text in (
        "The launch is on March 3rd.",
        "Our database is PostgreSQL 15.",
        "The on-call engineer this week is Ada.",
    ):
        memory_remember(project=project, text=text, trust="trusted")
    hits = memory_recall(project=project, query="when is the launch?", k=2)
    assistant = flow.Agent(
        "Answer from what you remember.",
        provider([{"text": "The launch is on March 3rd."}]),
        memory="project",
        name="assistant",
    )
    session = flow.Session.from_user_message("When is the launch?", project=project)
    session = assistant(session)
    recall_event = next(c.content for c in session.chunks if c.kind == "event")
    print([h.text for h in hits], recall_event)
    return {"top": hits[0].text, "recall_event": recall_event, "answer": session.text()}


if __name__ == "__main__":
    main()
