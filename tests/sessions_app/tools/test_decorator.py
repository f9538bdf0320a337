"""``@tool``: schemas from type hints and docstrings."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal, Optional

import pytest

from sessions_app.tools import FlowToolCall, FunctionTool, tool
from sessions_app.tools.decorator import parse_docstring


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class FakeSession:
    id = "s-1"
    placement = None


def test_simple_signature_with_google_docstring() -> None:
    @tool
    def add(a: int, b: int = 2) -> int:
        """Add two integers.

        Longer explanation that is not part of the description.

        Args:
            a: The first addend.
            b: The second addend,
                continued on a second line.

        Returns:
            The sum.
        """
        return a + b

    assert isinstance(add, FlowToolCall)
    assert add.schema() == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "description": "The first addend."},
                    "b": {
                        "type": "integer",
                        "description": "The second addend, continued on a second line.",
                        "default": 2,
                    },
                },
                "required": ["a"],
                "additionalProperties": False,
            },
        },
    }
    assert add.writes is False
    assert add(FakeSession(), {"a": 1}) == 3


def test_rich_types() -> None:
    @tool(name="forecast", description="Weather forecast.", writes=True)
    def weather(
        city: str,
        days: list[int],
        unit: Unit = Unit.CELSIUS,
        detail: Literal["short", "long"] = "short",
        tags: dict[str, float] | None = None,
        note: Optional[str] = None,  # noqa: UP045 - Optional is part of what is supported
        ratio: float = 0.5,
        verbose: bool = False,
        extra: Any = None,
        mixed: int | str = 0,
        plain_list: list = [],  # noqa: B006 - never mutated
        plain_dict: dict = {},  # noqa: B006 - never mutated
    ) -> dict[str, Any]:
        return {"unit": unit, "days": days}

    assert weather.name == "forecast"
    assert weather.description == "Weather forecast."
    assert weather.writes is True
    assert weather.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "array", "items": {"type": "integer"}},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            "detail": {"type": "string", "enum": ["short", "long"], "default": "short"},
            "tags": {
                "anyOf": [
                    {"type": "object", "additionalProperties": {"type": "number"}},
                    {"type": "null"},
                ],
                "default": None,
            },
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "ratio": {"type": "number", "default": 0.5},
            "verbose": {"type": "boolean", "default": False},
            "extra": {"default": None},
            "mixed": {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 0},
            "plain_list": {"type": "array", "default": []},
            "plain_dict": {"type": "object", "default": {}},
        },
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    # Enum values come back as members.
    assert weather(FakeSession(), {"city": "Oslo", "days": [1], "unit": "fahrenheit"}) == {
        "unit": Unit.FAHRENHEIT,
        "days": [1],
    }


def test_session_parameter_is_passed_and_not_in_the_schema() -> None:
    @tool
    def whoami(session: Any, greeting: Annotated[str, "How to greet."] = "hi") -> str:
        """Say who the session is."""
        return f"{greeting} {session.id}"

    assert whoami.parameters == {
        "type": "object",
        "properties": {
            "greeting": {"type": "string", "description": "How to greet.", "default": "hi"}
        },
        "required": [],
        "additionalProperties": False,
    }
    assert isinstance(whoami, FunctionTool)
    assert whoami.takes_session is True
    assert whoami(FakeSession(), {}) == "hi s-1"


def test_integral_floats_reach_int_parameters_as_int() -> None:
    @tool
    def double(n: int, x: float) -> list[Any]:
        """Double."""
        return [n * 2, x * 2, type(n).__name__, type(x).__name__]

    assert double(FakeSession(), {"n": 3.0, "x": 2}) == [6, 4.0, "int", "float"]


def test_unsupported_annotation_names_the_parameter() -> None:
    with pytest.raises(TypeError) as caught:

        @tool
        def bad(when: set[str]) -> None:
            """Bad."""

    assert str(caught.value) == (
        "tool 'bad', parameter 'when': unsupported type annotation set[str]"
    )


def test_missing_annotation_is_refused() -> None:
    with pytest.raises(TypeError, match="tool 'loose', parameter 'x': a type annotation"):

        @tool
        def loose(x) -> None:  # type: ignore[no-untyped-def]
            """Loose."""


def test_var_args_are_refused() -> None:
    with pytest.raises(TypeError, match="parameter 'rest': \\*args and \\*\\*kwargs"):

        @tool
        def star(*rest: int) -> None:
            """Star."""


def test_dict_with_non_string_keys_is_refused() -> None:
    with pytest.raises(TypeError, match="parameter 'm': dict keys must be str"):

        @tool
        def mapping(m: dict[int, str]) -> None:
            """Map."""


def test_invalid_tool_name_is_refused() -> None:
    with pytest.raises(ValueError, match="tool name 'has space'"):

        @tool(name="has space")
        def fine() -> None:
            """Fine."""


def test_parse_docstring_sections() -> None:
    description, args = parse_docstring(
        """Fetch a page
        from the web.

        Arguments:
            url (str): The address.
            timeout: Seconds.

        Raises:
            ValueError: never mind.
        """
    )
    assert description == "Fetch a page from the web."
    assert args == {"url": "The address.", "timeout": "Seconds."}
    assert parse_docstring(None) == ("", {})
