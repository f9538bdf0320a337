"""1. Hello, agent: one prompt, one provider, one answer appended to the session."""

from __future__ import annotations

from typing import Any

from openrath_project.examples._setup import django_ready, example_project, provider


def main() -> dict[str, Any]:
    django_ready()
    from openrath_project import flow

    greeter = flow.Agent(
        "You greet people warmly, in one sentence.",
        provider([{"text": "Hello, Ada! Welcome aboard."}]),
        name="greeter",
    )
    session = flow.Session.from_user_message("Say hello to Ada.", project=example_project())
    session = greeter(session)
    for chunk in session.chunks:
        print(f"{chunk.role:>9} [{chunk.agent or '-'}] {chunk.text}")
    return {"session": str(session.id), "answer": session.text(), "length": len(session)}


if __name__ == "__main__":
    main()
