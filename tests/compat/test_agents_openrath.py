"""flow.Agent in OpenRath's form: model shorthand, on_event deltas, Workflow, context manager."""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import BaseModel, Field

from openrath_project import flow
from openrath_project.flow.tool import FlowToolCall
from openrath_project.llm import Provider, RathLLMStreamDelta, RathLLMTokenUsage
from sessions_app.providers.openai_provider import OpenAIProvider
from tests.compat.support import Recorder, call, request_tool_names, scripted, tool_result_outputs
from tests.sessions_app.providers.fake_openai import FakeOpenAI, Reply, chunk

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_machine_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("OPENRATH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENRATH_PROVIDER_CONFIG", str(tmp_path / "none.json"))
    (tmp_path / "none.json").write_text("{}")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_DEFAULT_MODEL"):
        monkeypatch.delenv(name, raising=False)


def test_model_shorthand_builds_an_openai_provider_and_needs_a_provider_or_model() -> None:
    agent = flow.Agent("You are concise.", model="demo")

    assert isinstance(agent.provider, OpenAIProvider)
    assert (agent.provider.model, str(agent.provider)) == ("demo", "demo")
    with pytest.raises(
        ValueError, match='requires either provider=Provider\\(...\\) or model="..."'
    ):
        flow.Agent("You are concise.")


def test_an_agent_is_a_workflow_and_a_context_manager(project: Any) -> None:
    provider = scripted({"text": "Hi."})

    class Desk(flow.Workflow):
        def __init__(self) -> None:
            super().__init__(description="front desk")
            self.greeter = flow.Agent("Greet.", provider, description="Greets people")

        def forward(self, session: Any) -> Any:
            return self.greeter(session)

    desk = Desk()
    assert isinstance(desk.greeter, flow.Workflow)
    assert [name for name, _ in desk.named_children()] == ["greeter"]
    assert desk.greeter.description == "Greets people"

    with flow.Agent("Remember.", provider, memory="local") as agent:
        assert agent.memory == "local"
    with pytest.raises(RuntimeError, match="has no memory store"):
        agent.remember_memory("after close")


def test_on_event_gets_text_tool_call_finish_and_usage_deltas_like_example_07(project: Any) -> None:
    provider = scripted(
        {
            "text": None,
            "tool_calls": [call("c1", "add_numbers", a=2, b=3)],
            "usage": {"prompt_tokens": 20, "completion_tokens": 6},
        },
        {
            "text": "1 is one.\n2 is two.",
            "stream": ["1 is one.", "\n2 is two."],
            "usage": {"prompt_tokens": 30, "completion_tokens": 9},
        },
    )

    @flow.tool
    def add_numbers(a: int, b: int) -> int:
        """Add."""
        return a + b

    recorder = Recorder()
    agent = flow.Agent("You are concise.", provider, tools=[add_numbers], on_event=recorder)
    session = flow.Session.from_user_message("Count.", project=project)

    out = agent(session)

    assert out is not session
    assert len(session) == 1
    assert recorder.deltas == [
        RathLLMStreamDelta(
            tool_call_index=0,
            tool_call_id="c1",
            tool_call_name_delta="add_numbers",
            tool_call_args_delta='{"a": 2, "b": 3}',
        ),
        RathLLMStreamDelta(finish_reason="tool_calls"),
        RathLLMStreamDelta(usage=RathLLMTokenUsage(20, 6, 26)),
        RathLLMStreamDelta(content_delta="1 is one."),
        RathLLMStreamDelta(content_delta="\n2 is two."),
        RathLLMStreamDelta(finish_reason="stop"),
        RathLLMStreamDelta(usage=RathLLMTokenUsage(30, 9, 39)),
    ]
    assert (
        recorder.text
        == "\n[finish_reason=tool_calls]\n1 is one.\n2 is two.\n[finish_reason=stop]\n"
    )
    assert tool_result_outputs(out) == [5]
    assert (out.usage["prompt_tokens"], out.usage["completion_tokens"]) == (50, 15)
    assert out.usage["total_tokens"] == 65


def test_on_event_passes_the_openai_streams_tool_call_pieces_as_they_come(project: Any) -> None:
    with FakeOpenAI() as api:
        api.replies.append(
            Reply(
                sse=[
                    chunk({"role": "assistant", "content": None}),
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "call_1",
                                    "type": "function",
                                    "function": {"name": "workspace_path_exists", "arguments": ""},
                                }
                            ]
                        }
                    ),
                    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": '}}]}),
                    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}),
                    chunk({}, finish_reason="tool_calls"),
                    chunk(None, usage=(11, 4)),
                ]
            )
        )
        api.replies.append(
            Reply(
                sse=[
                    chunk({"role": "assistant", "content": "No "}),
                    chunk({"content": "x."}),
                    chunk({}, finish_reason="stop"),
                    chunk(None, usage=(20, 2)),
                ]
            )
        )
        provider = Provider(
            model="gpt-test",
            provider_kind="openai",
            api_key="sk-in-memory-7",
            base_url=api.base_url,
        )
        recorder = Recorder()
        session = flow.Session.from_user_message("Is there x?", project=project)

        session = flow.Agent("Check.", provider, on_event=recorder)(session)

    assert recorder.deltas == [
        RathLLMStreamDelta(
            tool_call_index=0, tool_call_id="call_1", tool_call_name_delta="workspace_path_exists"
        ),
        RathLLMStreamDelta(tool_call_index=0, tool_call_args_delta='{"path": '),
        RathLLMStreamDelta(tool_call_index=0, tool_call_args_delta='"x"}'),
        RathLLMStreamDelta(finish_reason="tool_calls"),
        RathLLMStreamDelta(usage=RathLLMTokenUsage(11, 4, 15)),
        RathLLMStreamDelta(content_delta="No "),
        RathLLMStreamDelta(content_delta="x."),
        RathLLMStreamDelta(finish_reason="stop"),
        RathLLMStreamDelta(usage=RathLLMTokenUsage(20, 2, 22)),
    ]
    first = api.requests[0]
    assert first.headers["authorization"] == "Bearer sk-in-memory-7"
    assert sorted(request_tool_names(first.body)) == sorted(
        [
            "list_workspace_files",
            "read_workspace_file",
            "run_code",
            "run_shell_command",
            "workspace_path_exists",
            "write_workspace_file",
        ]
    )
    # The in-process key reached the API and nowhere else: not in any chunk.
    assert all("sk-in-memory-7" not in str(c.content) for c in session.chunks)
    assert session.text() == "No x."


# --- example 05: a FlowToolCall written OpenRath's way (properties, pydantic) --------------------

_OPS = {ast.Add: operator.add, ast.Mult: operator.mul, ast.Pow: operator.pow}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError("only +, * and ** over numbers")


class Expression(BaseModel):
    expression: str = Field(description="An arithmetic expression.")


class Calculator(FlowToolCall):
    parallel_safe = True

    @property
    def name(self) -> str:  # type: ignore[override]
        return "calculator"

    @property
    def description(self) -> str | None:  # type: ignore[override]
        return "Evaluate an arithmetic expression."

    @property
    def parameters(self) -> Mapping[str, Any]:  # type: ignore[override]
        return dict(Expression.model_json_schema())

    def __call__(self, session: Any, arguments: Mapping[str, Any]) -> dict[str, Any]:
        parsed = Expression.model_validate(dict(arguments))
        return {
            "expression": parsed.expression,
            "result": _evaluate(ast.parse(parsed.expression, mode="eval")),
        }


def test_example_05_a_property_style_flowtoolcall_is_called_by_the_loop(project: Any) -> None:
    provider = scripted(
        {"tool_calls": [call("c1", "calculator", expression="(128 * 37) + (2 ** 10)")]},
        {"text": "It is 5760."},
    )
    agent = flow.Agent("Use the calculator.", provider, tools=[Calculator()])
    session = flow.Session.from_user_message("What is (128*37)+(2**10)?", project=project).to(
        "local"
    )

    session = agent(session)

    assert tool_result_outputs(session) == [
        {"expression": "(128 * 37) + (2 ** 10)", "result": 5760.0}
    ]
    assert agent.tool_schemas()[0]["function"]["name"] == "calculator"
    assert session.text() == "It is 5760."
