"""``@tool``: turn a typed, documented Python function into a :class:`FlowToolCall`.

The JSON schema comes from the type hints, the description from the docstring's first paragraph
and each parameter's description from its Google-style ``Args:`` entry (or from
``Annotated[T, "description"]``). A first parameter named ``session`` receives the session and is
not part of the schema. Supported annotations: ``str``, ``int``, ``float``, ``bool``, ``list[T]``,
``dict`` / ``dict[str, T]``, ``Optional[T]`` / ``T | None``, other unions, ``Literal[...]``,
``enum.Enum`` subclasses and ``Any``; anything else is a ``TypeError`` at decoration time naming
the parameter, so a broken tool fails at import, not in front of the model.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, overload

from jsonschema import Draft202012Validator

from sessions_app.tools.base import DEFAULT_MAX_OUTPUT_CHARS, FlowToolCall, check_tool_name

SESSION_PARAMETER = "session"
_SECTION_HEADER = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?|"
    r"Attributes|See Also|Warnings?|Todo):\s*$"
)
_ARG_SECTION = {"Args:", "Arguments:", "Parameters:"}
_ARG_LINE = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(\([^)]*\))?\s*:\s*(?P<desc>.*)$")

# Converts a validated JSON value back into what the function expects (enum members).
Converter = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class _Field:
    schema: dict[str, Any]
    convert: Converter


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(first paragraph as one line, {parameter: description}) of a Google-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    paragraph: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped:
            if paragraph:
                break
            continue
        if _SECTION_HEADER.match(stripped):
            break
        paragraph.append(stripped)

    descriptions: dict[str, str] = {}
    start = next((i for i, line in enumerate(lines) if line.strip() in _ARG_SECTION), None)
    if start is not None:
        base_indent = len(lines[start]) - len(lines[start].lstrip())
        item_indent: int | None = None
        current: str | None = None
        for line in lines[start + 1 :]:
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            if indent <= base_indent:
                break
            match = _ARG_LINE.match(line.strip())
            if match and (item_indent is None or indent == item_indent):
                item_indent = indent
                current = match.group("name")
                descriptions[current] = match.group("desc").strip()
            elif current is not None:
                descriptions[current] = f"{descriptions[current]} {line.strip()}".strip()
    return " ".join(paragraph), descriptions


def _json_type_of(values: list[Any]) -> str | None:
    kinds = set()
    for value in values:
        if isinstance(value, bool):
            kinds.add("boolean")
        elif isinstance(value, int):
            kinds.add("integer")
        elif isinstance(value, float):
            kinds.add("number")
        elif isinstance(value, str):
            kinds.add("string")
        elif value is None:
            kinds.add("null")
        else:
            return None
    return kinds.pop() if len(kinds) == 1 else None


def _field_for(annotation: Any, where: str) -> _Field:
    """The schema and converter of one annotation; ``TypeError`` naming ``where`` if unsupported."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)

    if origin is typing.Annotated:
        return _field_for(args[0], where)
    if annotation is Any:
        return _Field({}, _identity)
    if annotation is str:
        return _Field({"type": "string"}, _identity)
    if annotation is bool:
        return _Field({"type": "boolean"}, _identity)
    if annotation is int:
        # JSON Schema counts 3.0 as an integer; the function still gets an int.
        return _Field({"type": "integer"}, lambda value: int(value))
    if annotation is float:
        # JSON has one number type: an integral 3 is a valid float argument, passed as 3.0.
        return _Field({"type": "number"}, lambda value: float(value))
    if annotation is type(None):
        return _Field({"type": "null"}, _identity)
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        values = [member.value for member in annotation]
        schema: dict[str, Any] = {"enum": values}
        json_type = _json_type_of(values)
        if json_type is None:
            raise TypeError(f"{where}: enum {annotation.__name__} values must be JSON scalars")
        schema["type"] = json_type
        enum_type = annotation
        return _Field(schema, lambda value: enum_type(value))
    if origin is typing.Literal:
        values = list(args)
        json_type = _json_type_of(values)
        if json_type is None:
            raise TypeError(f"{where}: Literal values must be JSON scalars of one type")
        return _Field({"type": json_type, "enum": values}, _identity)
    if annotation is list or origin is list:
        if not args:
            return _Field({"type": "array"}, _identity)
        item = _field_for(args[0], where)
        convert_item = item.convert
        return _Field(
            {"type": "array", "items": item.schema},
            lambda value: [convert_item(element) for element in value],
        )
    if annotation is dict or origin is dict:
        if not args:
            return _Field({"type": "object"}, _identity)
        if args[0] is not str:
            raise TypeError(f"{where}: dict keys must be str (JSON object keys are strings)")
        value_field = _field_for(args[1], where)
        convert_value = value_field.convert
        return _Field(
            {"type": "object", "additionalProperties": value_field.schema},
            lambda value: {key: convert_value(element) for key, element in value.items()},
        )
    if origin is typing.Union or origin is types.UnionType:
        members = [_field_for(member, where) for member in args]
        schemas = [member.schema for member in members]
        return _Field({"anyOf": schemas}, _union_converter(args, members))
    raise TypeError(f"{where}: unsupported type annotation {annotation!r}")


def _union_converter(annotations: tuple[Any, ...], members: list[_Field]) -> Converter:
    """Convert with the first member whose schema accepts the value (None passes through)."""
    validators = [Draft202012Validator(member.schema) for member in members]

    def convert(value: Any) -> Any:
        if value is None:
            return None
        for annotation, member, validator in zip(annotations, members, validators, strict=True):
            if annotation is not type(None) and validator.is_valid(value):
                return member.convert(value)
        return value

    return convert


def _json_default(value: Any) -> tuple[bool, Any]:
    """(True, JSON form) of a parameter default, or (False, None) if it has none."""
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False, None
    return True, value


class FunctionTool(FlowToolCall):
    """A :class:`FlowToolCall` built by ``@tool`` from a function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        writes: bool = False,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> None:
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"tool {fn.__name__!r}: async functions are not supported")
        self.fn = fn
        self.name = check_tool_name(name or fn.__name__)
        doc_description, arg_descriptions = parse_docstring(inspect.getdoc(fn))
        self.description = description if description is not None else doc_description
        self.writes = writes
        self.max_output_chars = max_output_chars

        signature = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as exc:  # NameError etc. from a string annotation
            raise TypeError(f"tool {self.name!r}: cannot resolve its type hints: {exc}") from exc
        parameters = list(signature.parameters.values())
        self.takes_session = bool(parameters) and parameters[0].name == SESSION_PARAMETER
        if self.takes_session:
            parameters = parameters[1:]

        properties: dict[str, Any] = {}
        required: list[str] = []
        self._converters: dict[str, Converter] = {}
        for parameter in parameters:
            where = f"tool {self.name!r}, parameter {parameter.name!r}"
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise TypeError(f"{where}: *args and **kwargs cannot be described to a model")
            if parameter.kind is parameter.POSITIONAL_ONLY:
                raise TypeError(f"{where}: positional-only parameters are not supported")
            if parameter.name not in hints:
                raise TypeError(f"{where}: a type annotation is required")
            annotation = hints[parameter.name]
            field = _field_for(annotation, where)
            schema = dict(field.schema)
            description_text = _annotated_description(annotation) or arg_descriptions.get(
                parameter.name
            )
            if description_text:
                schema["description"] = description_text
            if parameter.default is parameter.empty:
                required.append(parameter.name)
            else:
                has_default, default = _json_default(parameter.default)
                if has_default:
                    schema["default"] = default
            properties[parameter.name] = schema
            self._converters[parameter.name] = field.convert

        self.parameters = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        Draft202012Validator.check_schema(self.parameters)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, session: Any, arguments: dict[str, Any]) -> Any:
        kwargs = {
            key: self._converters[key](value) if key in self._converters else value
            for key, value in arguments.items()
        }
        if self.takes_session:
            return self.fn(session, **kwargs)
        return self.fn(**kwargs)


def _annotated_description(annotation: Any) -> str | None:
    if typing.get_origin(annotation) is typing.Annotated:
        for meta in typing.get_args(annotation)[1:]:
            if isinstance(meta, str):
                return meta
    return None


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    writes: bool = False,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    writes: bool = False,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool from a function: ``@tool`` or ``@tool(name=..., writes=True)``."""

    def decorate(function: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            function,
            name=name,
            description=description,
            writes=writes,
            max_output_chars=max_output_chars,
        )

    if fn is not None:
        return decorate(fn)
    return decorate
