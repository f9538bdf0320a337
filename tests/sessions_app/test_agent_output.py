"""What an agent call returns: a new session (a copy-on-write fork of its input holding the
turn), except on a durable step's working session, where the turn lands in the run's session."""

from __future__ import annotations

from typing import Any

import pytest

from openrath_project import flow
from runs_app import registration, services
from runs_app.registry import WorkflowRegistry
from sessions_app.agents import Agent
from sessions_app.chunk_table import TokenUsage
from sessions_app.lineage_graph import LineageKind
from sessions_app.models import Chunk, LineageEdge
from sessions_app.models import Session as SessionRow
from sessions_app.providers import make_provider
from sessions_app.tools import tool
from sessions_app.value import Session
from tests.runs_app.conftest import drive


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion}


def says(*texts: str) -> Any:
    return make_provider("scripted", turns=[{"text": t, "usage": usage(7, 2)} for t in texts])


def transcript(session: Session) -> list[tuple[str, str, str]]:
    return [(c.role, c.text or c.kind, c.agent) for c in session.chunks]


@tool
def double(n: int) -> int:
    """Double a number.

    Args:
        n: the number.
    """
    return 2 * n


@pytest.mark.django_db
def test_the_input_is_unchanged_and_the_output_is_a_fork_holding_the_turn(project: Any) -> None:
    given = Session.from_user_message("Name a prime.", project=project)
    agent = Agent("Answer in one word.", says("Seven."), name="primer", system_tools=False)

    out = agent(given)

    assert out is not given
    assert out.id != given.id
    assert transcript(given) == [("user", "Name a prime.", "")]
    assert transcript(out) == [("user", "Name a prime.", ""), ("assistant", "Seven.", "primer")]
    assert out.text() == "Seven."
    assert given.text() is None
    assert (out.op, out.row.agent, out.row.base_id, out.row.base_len) == (
        "fork",
        "primer",
        given.id,
        1,
    )


@pytest.mark.django_db
def test_the_fork_is_one_row_and_one_edge_however_long_the_input(project: Any) -> None:
    long_input = Session.create(
        [{"role": "user", "content": f"note {n}"} for n in range(300)], project=project
    )
    agent = Agent("Sum it up.", says("Done."), name="summer", system_tools=False)
    before = (SessionRow.objects.count(), LineageEdge.objects.count(), Chunk.objects.count())

    out = agent(long_input)

    after = (SessionRow.objects.count(), LineageEdge.objects.count(), Chunk.objects.count())
    # One session row, one edge, and only the turn's chunk: nothing of the input is copied.
    assert tuple(b - a for a, b in zip(before, after, strict=True)) == (1, 1, 1)
    assert len(out) == 301
    assert len(long_input) == 300
    assert out.row.own_len == 1
    assert out.chunks[0].text == "note 0"
    assert out.chunks[300].text == "Done."


@pytest.mark.django_db
def test_the_lineage_edge_is_openraths_session_loop(project: Any) -> None:
    given = Session.from_user_message("Hi.", project=project)

    out = Agent("Greet.", says("Hello."), name="greeter", system_tools=False)(given)

    assert out.parent_session_ids == (given.id,)
    assert out.lineage_kind is LineageKind.OP_SESSION_LOOP
    assert out.lineage_operator == "run_session_loop"
    (edge,) = LineageEdge.objects.filter(child_id=out.id)
    assert (edge.parent_id, edge.op, edge.parent_len, edge.agent) == (
        given.id,
        "fork",
        1,
        "greeter",
    )
    # A fork the user makes stays an ordinary fork.
    plain = given.fork()
    assert (plain.lineage_kind, plain.lineage_operator) == (LineageKind.OP_FORK, "Session.fork")


@pytest.mark.django_db
def test_usage_is_the_calls_own_summed_over_its_model_turns(project: Any) -> None:
    provider = make_provider(
        "scripted",
        turns=[
            {
                "tool_calls": [{"id": "c1", "name": "double", "arguments": {"n": 4}}],
                "usage": usage(20, 3),
            },
            {"text": "8", "usage": usage(30, 1)},
        ],
    )
    given = Session.from_user_message("Double 4.", project=project)

    out = Agent("Use the tool.", provider, tools=[double], name="doubler")(given)

    assert given.cumulative_usage is None
    assert out.cumulative_usage == TokenUsage(
        prompt_tokens=50, completion_tokens=4, total_tokens=54
    )
    assert (out.usage["prompt_tokens"], out.usage["completion_tokens"]) == (50, 4)
    assert [c.kind for c in out.chunks] == ["message", "tool_call", "tool_result", "message"]


@pytest.mark.django_db
def test_chained_agents_each_return_a_new_session(project: Any) -> None:
    given = Session.from_user_message("Draft a title.", project=project)
    writer = Agent("Write.", says("A Title"), name="writer", system_tools=False)
    editor = Agent("Edit.", says("A Better Title"), name="editor", system_tools=False)

    edited = editor(writer(given))

    (draft_id,) = edited.parent_session_ids
    draft = Session.load(draft_id)
    assert draft.parent_session_ids == (given.id,)
    assert transcript(given) == [("user", "Draft a title.", "")]
    assert transcript(draft) == [("user", "Draft a title.", ""), ("assistant", "A Title", "writer")]
    assert transcript(edited) == [
        ("user", "Draft a title.", ""),
        ("assistant", "A Title", "writer"),
        ("assistant", "A Better Title", "editor"),
    ]
    # As in OpenRath, each output's usage is its own call's, not the chain's.
    assert draft.cumulative_usage == edited.cumulative_usage == TokenUsage(7, 2, 9)
    assert edited.row.own_len == 1  # each link stores only its own turn


# --- inside a durable step ----------------------------------------------------------------------


class AgentInAStep(flow.Workflow):
    """Calls an agent on the run's working session, twice."""

    name = "agent_output_in_a_step"

    @flow.step(entry=True, effects="none")
    def answer(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        agent = flow.Agent(
            "Answer.", says("On the run.", "Aside."), name="answerer", system_tools=False
        )
        returned = agent(ctx.session)
        again = agent(returned)
        return {
            "returned_is_run_session": returned is ctx.session and again is ctx.session,
            "run_session_text": ctx.session.text(),
        }


@pytest.fixture
def step_registry(monkeypatch: pytest.MonkeyPatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    return fresh


@pytest.mark.django_db(transaction=True)
def test_in_a_durable_step_the_turn_lands_in_the_runs_session(
    step_registry: WorkflowRegistry, project: Any
) -> None:
    run, _ = services.run_create(
        project=project,
        workflow=step_registry.get("agent_output_in_a_step"),
        user_message="The question.",
    )

    done = drive(step_registry, run.id)

    assert done.status == "succeeded"
    assert done.output is not None
    assert done.session_id is not None
    assert done.output["returned_is_run_session"] is True
    assert done.output["run_session_text"] == "Aside."
    run_session = Session.load(done.session_id)
    assert transcript(run_session) == [
        ("user", "The question.", ""),
        ("assistant", "On the run.", "answerer"),
        ("assistant", "Aside.", "answerer"),
    ]
    # No output fork: the run's session is the value the run carries and checkpoints refer to.
    assert not LineageEdge.objects.filter(parent_id=done.session_id).exists()
    assert {c.run for c in run_session.chunks} == {str(done.id)}
