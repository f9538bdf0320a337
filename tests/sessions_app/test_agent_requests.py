"""What an agent's model is asked (the request digests its answers record) and the call source
hook: model answers and tool results served from a record instead of the provider and tools."""

from __future__ import annotations

from typing import Any

from sessions_app import context
from sessions_app.agents import REQUEST_PARTS, Agent, model_request
from sessions_app.providers import DeltaCallback, ModelTurn, Provider, make_provider
from sessions_app.providers.base import ToolCallRequest, Usage
from sessions_app.tools import ToolOutcome, tool
from sessions_app.value import Session
from tests.sessions_app.test_agents import call, scripted

ADDED: list[tuple[int, int]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ADDED.append((a, b))
    return a + b


def _two_turns() -> Any:
    return scripted(
        {
            "text": "Let me add.",
            "tool_calls": [call("c1", "add", {"a": 2, "b": 3})],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        },
        {"text": "It is 5.", "usage": {"prompt_tokens": 20, "completion_tokens": 3}},
    )


def test_each_answer_records_the_digests_of_what_the_provider_was_sent(project):
    provider = _two_turns()
    agent = Agent("You add numbers.", provider, tools=[add], name="adder", system_tools=False)
    out = agent(Session.from_user_message("Add 2 and 3.", project=project))

    assistant = [c for c in out.chunks if c.role == "assistant"]
    assert [(c.kind, "request" in (c.usage or {})) for c in assistant] == [
        ("message", True),  # the first chunk of the first answer
        ("tool_call", False),  # the same answer: tokens and request are counted once
        ("message", True),  # the second answer
    ]
    recorded = [c.usage["request"] for c in assistant if "request" in c.usage]
    sent = [model_request(provider, r["messages"], r["tools"]) for r in provider.requests]
    assert recorded == sent
    assert all(sorted(r) == sorted(REQUEST_PARTS) for r in recorded)
    assert all(len(d) == 32 and int(d, 16) >= 0 for r in recorded for d in r.values())
    # same prompt, tools and provider; the second call's conversation holds the tool result
    first, second = recorded
    assert [first[p] == second[p] for p in REQUEST_PARTS] == [True, False, True, True]
    # the stored chunk (read back from the database) holds the same digests
    stored = Session.load(out.id).chunks
    assert [c.usage["request"] for c in stored if c.usage and "request" in c.usage] == recorded


def test_model_request_names_the_part_that_changed():
    provider = make_provider("scripted", turns=[])
    messages = [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": "Add 2 and 3."},
    ]
    schemas = [add.schema()]
    base = model_request(provider, messages, schemas)

    def changed(other: dict[str, str]) -> list[str]:
        return [part for part in REQUEST_PARTS if other[part] != base[part]]

    reprompted = [{"role": "system", "content": "You add numbers, tersely."}, messages[1]]
    assert changed(model_request(provider, reprompted, schemas)) == ["system"]
    asked = [messages[0], {"role": "user", "content": "Add 2 and 4."}]
    assert changed(model_request(provider, asked, schemas)) == ["messages"]
    assert changed(model_request(provider, messages, None)) == ["tools"]
    other_model = make_provider("scripted", turns=[], model="scripted-2")
    assert changed(model_request(other_model, messages, schemas)) == ["params"]
    assert model_request(provider, [dict(m) for m in messages], list(schemas)) == base


class NeverCalled(Provider):
    kind = "scripted"
    model = "scripted-1"

    def __init__(self) -> None:
        self.calls = 0

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelTurn:
        self.calls += 1
        raise AssertionError("the call source should have answered")


class Served:
    """A call source: two answers, and a result for call ``c1`` only (``c2`` runs the tool)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int, list[dict[str, Any]]]] = []
        self.answers = [
            ModelTurn(
                text="Adding twice.",
                tool_calls=(
                    ToolCallRequest(id="c1", name="add", arguments='{"a": 1, "b": 1}'),
                    ToolCallRequest(id="c2", name="add", arguments='{"a": 4, "b": 5}'),
                ),
                usage=Usage(7, 2, 9),
                model="scripted-1",
                provider="scripted",
                finish_reason="tool_calls",
            ),
            ModelTurn(
                text="Done.",
                tool_calls=(),
                usage=Usage(9, 1, 10),
                model="scripted-1",
                provider="scripted",
                finish_reason="stop",
            ),
        ]

    def model_turn(self, agent, session, messages, schemas, turn_number):
        self.asked.append((agent.name, turn_number, messages))
        return self.answers[turn_number - 1]

    def tool_result(self, agent, session, call):
        if call.id == "c1":
            return ToolOutcome(output=2, error=None, error_kind=None, truncated=False)
        return None


def test_a_call_source_in_the_write_context_answers_instead_of_provider_and_tool(project):
    ADDED.clear()
    provider = NeverCalled()
    source = Served()
    agent = Agent("You add numbers.", provider, tools=[add], name="adder", system_tools=False)
    with context.writing(recorded=source):
        out = agent(Session.from_user_message("Add twice.", project=project))
    assert provider.calls == 0
    assert ADDED == [(4, 5)]  # c1 was served; c2 (None from the source) ran the tool
    assert [(name, turn) for name, turn, _ in source.asked] == [("adder", 1), ("adder", 2)]
    assert source.asked[0][2] == [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": "Add twice."},
    ]
    results = [c.content for c in out.chunks if c.kind == "tool_result"]
    assert [(r["tool_call_id"], r["output"]) for r in results] == [("c1", 2), ("c2", 9)]
    assert out.chunks[-1].content == {"text": "Done."}
    # the source is set only inside the context
    assert context.current().recorded is None
