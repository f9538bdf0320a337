"""Example 11: a Selector routes between agents; ``EmptyWorkflow`` ends OpenRath's while loop."""

from __future__ import annotations

from typing import Any

import pytest

from openrath_project import flow
from tests.compat.support import scripted

pytestmark = pytest.mark.django_db


def agents(turns: dict[str, list[str]]) -> tuple[Any, Any, Any]:
    def agent(prompt: str, description: str, key: str) -> Any:
        return flow.Agent(
            prompt,
            scripted(*({"text": t} for t in turns.get(key, []))),
            description=description,
            system_tools=False,
        )

    return (
        agent("You handle billing.", "Billing, invoices, refunds", "billing"),
        agent("You solve technical problems.", "Installation, errors", "tech"),
        agent("You write a closing summary.", "Wrap up and summarize", "wrapup"),
    )


def test_if_routes_to_one_branch_once(project: Any) -> None:
    billing, tech, _ = agents({"billing": ["Refund issued for the duplicate charge."]})
    selector = flow.Selector(scripted({"text": "0"}))
    session = flow.Session.from_user_message("My invoice was charged twice.", project=project)

    chosen = selector.forward(session, billing, tech)

    assert not isinstance(chosen, flow.EmptyWorkflow)
    assert chosen.description == "Billing, invoices, refunds"
    session = chosen(session)
    assert session.text() == "Refund issued for the duplicate charge."


def test_while_loops_until_the_selector_says_minus_one(project: Any) -> None:
    billing, tech, wrapup = agents(
        {"tech": ["Reinstall with --force."], "wrapup": ["Fixed the install; summary sent."]}
    )
    # The router answers in OpenRath's style: an index, prose with an index, then -1.
    selector = flow.Selector(scripted({"text": "0"}, {"text": "I pick 2."}, {"text": "-1"}))
    session = flow.Session.from_user_message("Install error, then a summary.", project=project)

    routed = []
    while not isinstance(
        nxt := selector.forward(session, tech, billing, wrapup), flow.EmptyWorkflow
    ):
        routed.append(nxt.description)
        session = nxt(session)
        assert len(routed) <= 4, "the selector never said it was done"

    assert routed == ["Installation, errors", "Wrap up and summarize"]
    assert session.text() == "Fixed the install; summary sent."
    decisions = [c.content for c in session.chunks if c.kind == "event"]
    assert [(d["choice"] is None, d["index"], d["fallback"]) for d in decisions] == [
        (False, 0, False),
        (False, 2, False),
        (True, -1, False),
    ]


def test_an_unparseable_answer_also_ends_the_loop(project: Any) -> None:
    billing, tech, _ = agents({})
    selector = flow.Selector(scripted({"text": "Hard to say."}))
    session = flow.Session.from_user_message("?", project=project)

    chosen = selector.forward(session, billing, tech)

    assert isinstance(chosen, flow.EmptyWorkflow)
    assert chosen(session) is session
    assert isinstance(flow.Selector(scripted()).forward(session), flow.EmptyWorkflow)
