"""``dispatch_tool``: model mistakes become error outcomes; outputs are capped."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from sessions_app.providers import ToolCallRequest
from sessions_app.tools import (
    CallCounter,
    FlowToolCall,
    ToolOutcome,
    ToolPolicy,
    ToolPolicyViolation,
    dispatch_tool,
    tool,
)
from sessions_app.tools.dispatch import cap_output


class FakeSession:
    id = "s-1"
    placement = None


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def explode(message: str) -> None:
    """Raise."""
    raise RuntimeError(message)


@tool
def slow() -> None:
    """Time out."""
    raise TimeoutError("took too long")


@tool(max_output_chars=20)
def chatty(n: int) -> str:
    """Print n x's."""
    return "x" * n


@tool(max_output_chars=30)
def structured(n: int) -> dict[str, Any]:
    """A dict that grows."""
    return {"items": list(range(n))}


class Opaque:
    def __str__(self) -> str:
        return "<opaque thing>"


@tool
def opaque() -> Any:
    """Return something JSON cannot encode."""
    return Opaque()


@tool
def forbidden() -> None:
    """Raise a policy violation from inside."""
    raise ToolPolicyViolation("not in this workspace")


TOOLS: dict[str, FlowToolCall] = {
    t.name: t for t in (add, explode, slow, chatty, structured, opaque, forbidden)
}


def call(name: str, arguments: str, **kwargs: Any) -> ToolOutcome:
    return dispatch_tool(
        TOOLS, FakeSession(), ToolCallRequest(id="c1", name=name, arguments=arguments), **kwargs
    )


def test_success() -> None:
    assert call("add", '{"a": 2, "b": 3}') == ToolOutcome(
        output=5, error=None, error_kind=None, truncated=False
    )


def test_unknown_tool() -> None:
    assert call("nope", "{}") == ToolOutcome(
        output=None,
        error=(
            "unknown tool 'nope'; available tools: add, chatty, explode, forbidden, opaque, "
            "slow, structured"
        ),
        error_kind="unknown_tool",
        truncated=False,
    )


def test_arguments_that_are_not_json() -> None:
    outcome = call("add", '{"a": 2, "b": ')
    assert outcome.error_kind == "invalid_tool_arguments"
    assert outcome.error is not None
    assert outcome.error.startswith("tool 'add': arguments are not valid JSON: Expecting value")
    assert outcome.output is None


def test_arguments_that_are_not_an_object() -> None:
    outcome = call("add", "[1, 2]")
    assert (outcome.error_kind, outcome.error) == (
        "invalid_tool_arguments",
        "tool 'add': arguments must be a JSON object, got list",
    )


def test_schema_violations_name_the_field() -> None:
    outcome = call("add", '{"a": "two", "c": 1}')
    assert outcome.error_kind == "invalid_tool_arguments"
    assert outcome.error == (
        "invalid arguments for tool 'add': "
        "at the arguments object: 'b' is a required property; "
        "at the arguments object: Additional properties are not allowed ('c' was unexpected); "
        "at 'a': 'two' is not of type 'integer'"
    )


def test_nested_path_is_named() -> None:
    outcome = dispatch_tool(
        {"nested": _NestedTool()},
        FakeSession(),
        ToolCallRequest(id="c", name="nested", arguments='{"items": [{"n": 1}, {"n": "x"}]}'),
    )
    assert outcome.error == (
        "invalid arguments for tool 'nested': at 'items/1/n': 'x' is not of type 'integer'"
    )


class _NestedTool(FlowToolCall):
    name = "nested"
    description = "Nested arguments."
    parameters = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"n": {"type": "integer"}}},
            }
        },
    }

    def __call__(self, session: Any, arguments: dict[str, Any]) -> Any:
        return arguments


def test_empty_arguments_mean_no_arguments() -> None:
    assert call("opaque", "").output == "<opaque thing>"


def test_exception_in_the_tool_is_reported_without_traceback() -> None:
    assert call("explode", '{"message": "kaboom"}') == ToolOutcome(
        output=None,
        error="RuntimeError: kaboom",
        error_kind="tool_execution_exception",
        truncated=False,
    )


def test_long_error_messages_have_their_own_cap() -> None:
    outcome = call("explode", json.dumps({"message": "e" * 5_000}))
    assert outcome.error == ("RuntimeError: " + "e" * 5_000)[:4_000] + "…[truncated 1014 chars]"
    assert (outcome.error_kind, outcome.truncated) == ("tool_execution_exception", True)


def test_timeout_in_the_tool() -> None:
    assert call("slow", "{}") == ToolOutcome(
        output=None, error="TimeoutError: took too long", error_kind="tool_timeout", truncated=False
    )


def test_policy_violation_inside_the_tool() -> None:
    assert call("forbidden", "{}") == ToolOutcome(
        output=None, error="not in this workspace", error_kind="policy_violation", truncated=False
    )


def test_string_output_is_capped_with_a_marker() -> None:
    assert call("chatty", '{"n": 10}') == ToolOutcome(
        output="x" * 10, error=None, error_kind=None, truncated=False
    )
    # The JSON text of 18 x's is 20 characters: exactly at the limit.
    assert call("chatty", '{"n": 18}').truncated is False
    assert call("chatty", '{"n": 100}') == ToolOutcome(
        output="x" * 20 + "…[truncated 80 chars]", error=None, error_kind=None, truncated=True
    )


def test_structured_output_over_the_cap_becomes_truncated_json_text() -> None:
    outcome = call("structured", '{"n": 20}')
    assert outcome.truncated is True
    assert outcome.output == '{"items": [0, 1, 2, 3, 4, 5, 6…[truncated 51 chars]'
    assert call("structured", '{"n": 3}').output == {"items": [0, 1, 2]}


def test_non_json_output_is_stringified() -> None:
    assert call("opaque", "{}").output == "<opaque thing>"
    assert cap_output({"n": float("nan")}, 100) == ("{'n': nan}", False)


def test_policy_allowed_tools() -> None:
    policy = ToolPolicy(allowed_tools=frozenset({"add"}))
    assert call("add", '{"a": 1, "b": 1}', policy=policy).output == 2
    assert call("chatty", '{"n": 1}', policy=policy) == ToolOutcome(
        output=None,
        error="tool 'chatty' is not allowed; allowed tools: add",
        error_kind="policy_violation",
        truncated=False,
    )


def test_call_counter_limits_calls_per_run() -> None:
    counter = ToolPolicy(max_calls=2).new_counter()
    assert call("add", '{"a": 1, "b": 1}', counter=counter).output == 2
    assert call("nope", "{}", counter=counter).error_kind == "unknown_tool"
    third = call("add", '{"a": 1, "b": 1}', counter=counter)
    assert third == ToolOutcome(
        output=None,
        error="tool call limit reached: 2 call(s) per run; this call ('add') was not run",
        error_kind="policy_violation",
        truncated=False,
    )
    assert counter.count == 2


def test_call_counter_is_exact_under_threads() -> None:
    counter = CallCounter(max_calls=50)
    granted: list[int] = []
    refused: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(20):
            try:
                number = counter.take("t")
            except ToolPolicyViolation as exc:
                with lock:
                    refused.append(str(exc))
            else:
                with lock:
                    granted.append(number)

    threads = [threading.Thread(target=worker) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert sorted(granted) == list(range(1, 51))
    assert len(refused) == 50


def test_broken_tool_schema_is_reported_not_raised() -> None:
    class Broken(FlowToolCall):
        name = "broken"
        parameters = {"type": "object", "properties": {"a": {"type": "no-such-type"}}}

        def __call__(self, session: Any, arguments: dict[str, Any]) -> Any:
            return None

    outcome = dispatch_tool(
        {"broken": Broken()}, FakeSession(), ToolCallRequest(id="c", name="broken", arguments="{}")
    )
    assert outcome.error_kind == "invalid_tool_schema"
    assert outcome.error is not None
    assert outcome.error.startswith("tool 'broken' has an invalid schema: ")


@pytest.mark.parametrize(
    ("command", "pattern"),
    [
        ("rm -rf /", "rm -rf /"),
        ("sudo  rm   -rf   / --no-preserve-root", "rm -rf /"),
        ("shutdown -h now", "shutdown"),
        ("echo x; reboot", "reboot"),
        ("mkfs.ext4 /dev/sda1", "mkfs"),
        ("dd if=/dev/zero of=/dev/sda", "dd if="),
        (":(){ :|:& };:", ":(){ "),
    ],
)
def test_default_deny_list(command: str, pattern: str) -> None:
    with pytest.raises(ToolPolicyViolation) as caught:
        ToolPolicy().check_command(command)
    assert str(caught.value) == f"command matches the deny pattern {pattern!r}"


def test_allow_list_checks_the_program() -> None:
    policy = ToolPolicy(command_allow=("ls", "cat", "python3"))
    policy.check_command("ls -la")
    policy.check_command("/bin/cat notes.txt")
    with pytest.raises(ToolPolicyViolation) as caught:
        policy.check_command("curl http://example.com")
    assert str(caught.value) == "program 'curl' is not on the allow list (ls, cat, python3)"
    with pytest.raises(ToolPolicyViolation, match="empty command"):
        policy.check_command("   ")


def test_effective_timeout_never_exceeds_the_policy() -> None:
    policy = ToolPolicy(command_timeout_seconds=5)
    assert policy.effective_timeout(None) == 5
    assert policy.effective_timeout(2) == 2
    assert policy.effective_timeout(100) == 5
