"""Example 09: ``Agent(memory="local")`` with remember / recall / commit over memory_app."""

from __future__ import annotations

from typing import Any

import pytest

from memory_app.models import MemoryEntry
from openrath_project import flow
from openrath_project.errors import ValidationFailed
from tests.compat.support import scripted

pytestmark = pytest.mark.django_db


def test_example_09_remember_then_recall_without_any_model(project: Any) -> None:
    with flow.Agent("You are concise.", model="demo", memory="local") as agent:
        first = agent.remember_memory("The user prefers a dark colour theme at night.")
        agent.remember_memory("The user reads English and writes Python.")

        found = agent.recall_memory("dark theme at night", top_k=3)

    assert first.uri == f"memory://user/memories/preferences/{first.id.hex}"
    assert first.bytes_written == len("The user prefers a dark colour theme at night.")
    assert found.hits[0].uri == first.uri
    assert found.hits[0].snippet == "The user prefers a dark colour theme at night."
    assert found.hits[0].score > 0
    assert all(h.score <= found.hits[0].score for h in found.hits)
    entries = MemoryEntry.objects.filter(project=project)
    assert sorted((e.scope, e.agent, e.metadata["category"]) for e in entries) == [
        ("project", "", "preferences"),
        ("project", "", "preferences"),
    ]


def test_scopes_and_targets(project: Any, other_project: Any) -> None:
    agent = flow.Agent("Helper.", model="demo", memory="local", project=project, name="helper")
    mine = agent.remember_memory("helper likes tables", scope="agent", category="style")
    shared = agent.remember_memory("the team likes tables too")
    again = agent.remember_memory("the team likes tables too")

    assert mine.uri == f"memory://agent/memories/style/{mine.id.hex}"
    assert (again.id, again.created) == (shared.id, False)  # stored once
    assert {h.uri for h in agent.recall_memory("tables").hits} == {mine.uri, shared.uri}
    only_agent = agent.recall_memory("tables", target_uri="memory://agent/memories/style")
    assert [h.uri for h in only_agent.hits] == [mine.uri]
    # Another agent sees the project's note but not helper's own.
    other = flow.Agent("Other.", model="demo", memory="local", project=project, name="other")
    assert [h.uri for h in other.recall_memory("tables").hits] == [shared.uri]
    # Another project's agent sees nothing.
    stranger = flow.Agent("S.", model="demo", memory="local", project=other_project)
    assert stranger.recall_memory("tables").hits == ()

    count = MemoryEntry.objects.count()
    with pytest.raises(ValidationFailed, match="memory scope 'global' is not one of"):
        agent.remember_memory("x", scope="global")
    with pytest.raises(ValidationFailed, match="scope='session' needs the session"):
        agent.remember_memory("x", scope="session")
    assert MemoryEntry.objects.count() == count
    with pytest.raises(RuntimeError, match="has no memory store"):
        flow.Agent("No memory.", model="demo").recall_memory("x")


def test_commit_memory_and_commit_on_forward(project: Any) -> None:
    provider = scripted(
        {"text": "Hello."},
        {"text": '["The user greets in one word."]'},
    )
    agent = flow.Agent(
        "Be brief.", provider, memory="local", commit_on_forward=True, system_tools=False
    )
    session = flow.Session.from_user_message("Say hello in one word.", project=project)

    out = agent(session)

    assert out.text() == "Hello."
    [entry] = MemoryEntry.objects.filter(project=project)
    assert (entry.text, entry.scope, entry.source_session_id) == (
        "The user greets in one word.",
        "project",
        out.id,  # committed from the output session (the one holding the turn)
    )
    # The next call recalls it (an event chunk records what was recalled).
    explicit = flow.Agent(
        "Be brief.",
        scripted({"text": "Hi."}, {"text": '["The user greets in one word.", "New fact."]'}),
        memory="local",
        system_tools=False,
    )
    later = flow.Session.from_user_message("Greet me in one word.", project=project)
    later = explicit(later)
    recalls = [c.content for c in later.chunks if c.kind == "event"]
    assert recalls[0]["entries"] == [str(entry.id)]
    result = explicit.commit_memory(later)
    assert result.extracted_count == 1  # the first fact was already stored
    assert MemoryEntry.objects.filter(project=project).count() == 2
