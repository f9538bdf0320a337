"""6. Streaming: token deltas while the model writes, and committed chunks after commit.

In the server these reach the browser over WebSockets (docs/streaming.md); here a listener on
the publishing hooks prints them.
"""

from __future__ import annotations

from typing import Any

from openrath_project.examples._setup import django_ready, example_project, provider


def main() -> dict[str, Any]:
    django_ready()
    from openrath_project import flow
    from sessions_app import streaming

    seen: list[tuple[str, dict[str, Any]]] = []
    unsubscribe = streaming.subscribe(lambda event, payload: seen.append((event, payload)))
    try:
        poet = flow.Agent(
            "You write one-line poems.",
            provider(
                [
                    {
                        "text": "Chunks arrive in order, exactly once.",
                        "stream": ["Chunks ", "arrive ", "in order, ", "exactly once."],
                    }
                ]
            ),
            name="poet",
        )
        session = flow.Session.from_user_message("A poem about streams.", project=example_project())
        session = poet(session)
    finally:
        unsubscribe()
    deltas = [p["delta"] for e, p in seen if e == "delta"]
    commits = [(p["first"], p["last"]) for e, p in seen if e == "chunks"]
    print("deltas:", deltas)
    print("committed chunk ranges:", commits)
    return {"deltas": deltas, "commits": commits, "answer": session.text()}


if __name__ == "__main__":
    main()
