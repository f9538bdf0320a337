"""Run one model tool call against a set of tools, turning every model mistake into data.

A bad call (unknown tool, broken JSON, arguments that miss the schema, a tool that raises, a
policy refusal) becomes a :class:`ToolOutcome` with an ``error`` the model can read and correct;
``dispatch_tool`` itself does not raise for any of them. Outputs are capped so one tool cannot
flood the context window.

Error kinds: ``unknown_tool``, ``invalid_tool_arguments``, ``policy_violation``,
``tool_timeout`` (the tool raised ``TimeoutError``), ``tool_execution_exception`` and
``invalid_tool_schema`` (the tool's own schema is broken: a bug in the tool, not the call).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

from openrath_project.jsontext import nul_path, without_nul
from sessions_app.providers.base import ToolCallRequest
from sessions_app.tools.base import FlowToolCall
from sessions_app.tools.policy import CallCounter, ToolPolicy, ToolPolicyViolation

logger = logging.getLogger(__name__)

UNKNOWN_TOOL = "unknown_tool"
INVALID_TOOL_ARGUMENTS = "invalid_tool_arguments"
POLICY_VIOLATION = "policy_violation"
TOOL_TIMEOUT = "tool_timeout"
TOOL_EXECUTION_EXCEPTION = "tool_execution_exception"
INVALID_TOOL_SCHEMA = "invalid_tool_schema"

_MAX_REPORTED_ERRORS = 5
#: Error messages have their own cap: a tool's small output limit must not hide why it failed.
ERROR_MAX_CHARS = 4_000


@dataclass(frozen=True)
class ToolOutcome:
    """The result of one tool call: ``output`` or ``error`` (with its kind), maybe truncated."""

    output: Any
    error: str | None
    error_kind: str | None
    truncated: bool
    #: The whole output when ``output`` was truncated (the agent keeps it as an artifact).
    full_output: Any = field(default=None, repr=False, compare=False)
    #: The artifact reference of the whole output, once stored.
    artifact: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_content(self) -> Any:
        """What the model sees as the tool message: the output, or ``{"error", "kind"}``."""
        if self.error is not None:
            return {"error": self.error, "kind": self.error_kind}
        return self.output


def _failure(kind: str, message: str) -> ToolOutcome:
    text, truncated = truncate_text(without_nul(message), ERROR_MAX_CHARS)
    return ToolOutcome(output=None, error=text, error_kind=kind, truncated=truncated)


def truncate_text(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters plus a marker saying how many were dropped."""
    if len(text) <= limit:
        return text, False
    dropped = len(text) - limit
    return f"{text[:limit]}…[truncated {dropped} chars]", True


def cap_output(output: Any, max_chars: int) -> tuple[Any, bool]:
    """Keep JSON-serialisable output as is (else ``str()`` it); truncate when its JSON is long.

    The limit applies to the JSON text because that is what reaches the model; a value over it
    becomes a string (the original string, or the JSON text of a structure) cut to ``max_chars``.
    """
    try:
        encoded = json.dumps(output, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        output = str(output)
        encoded = json.dumps(output, ensure_ascii=False)
    if "\\u0000" in encoded and nul_path(output) is not None:
        # A chunk cannot hold NUL (PostgreSQL): the model sees U+FFFD, as for undecodable
        # bytes; a truncated original is kept whole as an artifact.
        output = without_nul(output)
        encoded = json.dumps(output, ensure_ascii=False)
    if len(encoded) <= max_chars:
        return output, False
    raw = output if isinstance(output, str) else encoded
    return truncate_text(raw, max_chars)


@functools.lru_cache(maxsize=256)
def _validator_for(schema_json: str) -> Draft202012Validator:
    schema = json.loads(schema_json)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _location(error: ValidationError) -> str:
    path = "/".join(str(part) for part in error.absolute_path)
    return f"'{path}'" if path else "the arguments object"


def validation_problems(schema: Mapping[str, Any], arguments: Any) -> list[str]:
    """Human-readable schema violations, each naming where it is; empty when valid."""
    # ``default=dict``: OpenRath-style tools may describe their parameters with read-only
    # mappings (``MappingProxyType``), which are JSON objects all the same.
    validator = _validator_for(json.dumps(schema, sort_keys=True, default=dict))
    errors = sorted(
        validator.iter_errors(arguments),
        key=lambda error: (list(map(str, error.absolute_path)), error.message),
    )
    return [f"at {_location(error)}: {error.message}" for error in errors]


def parse_arguments(raw: str) -> dict[str, Any]:
    """The call's arguments as a dict; ``ValueError`` with a model-readable reason otherwise."""
    if raw is None or not raw.strip():
        # Several models send "" for a tool without parameters.
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"arguments are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
    return value


def dispatch_tool(
    tools: Mapping[str, FlowToolCall],
    session: Any,
    call: ToolCallRequest,
    *,
    policy: ToolPolicy | None = None,
    counter: CallCounter | None = None,
) -> ToolOutcome:
    """Run ``call`` with the matching tool and report what happened.

    Order: the per-run counter (every call counts, so a model stuck repeating a bad call still
    hits the limit), the tool lookup, the policy's tool list, argument parsing and validation,
    then the tool itself.
    """
    tool = tools.get(call.name)
    try:
        if counter is not None:
            counter.take(call.name)
    except ToolPolicyViolation as exc:
        return _failure(POLICY_VIOLATION, str(exc))

    if tool is None:
        known = ", ".join(sorted(tools)) or "(none)"
        return _failure(UNKNOWN_TOOL, f"unknown tool {call.name!r}; available tools: {known}")

    if policy is not None:
        try:
            policy.check_tool(call.name)
        except ToolPolicyViolation as exc:
            return _failure(POLICY_VIOLATION, str(exc))

    try:
        arguments = parse_arguments(call.arguments)
    except ValueError as exc:
        return _failure(INVALID_TOOL_ARGUMENTS, f"tool {call.name!r}: {exc}")

    try:
        problems = validation_problems(tool.parameters, arguments)
    except SchemaError as exc:
        logger.error("tool %r has an invalid parameter schema: %s", call.name, exc.message)
        return _failure(
            INVALID_TOOL_SCHEMA, f"tool {call.name!r} has an invalid schema: {exc.message}"
        )
    if problems:
        shown = problems[:_MAX_REPORTED_ERRORS]
        more = len(problems) - len(shown)
        suffix = f"; and {more} more" if more else ""
        return _failure(
            INVALID_TOOL_ARGUMENTS,
            f"invalid arguments for tool {call.name!r}: {'; '.join(shown)}{suffix}",
        )

    try:
        output = tool(session, arguments)
    except ToolPolicyViolation as exc:
        return _failure(POLICY_VIOLATION, str(exc))
    except TimeoutError as exc:
        return _failure(TOOL_TIMEOUT, f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        # The model sees the type and message only; the traceback goes to the log.
        logger.info("tool %r raised", call.name, exc_info=True)
        return _failure(TOOL_EXECUTION_EXCEPTION, f"{type(exc).__name__}: {exc}")

    capped, truncated = cap_output(output, tool.max_output_chars)
    return ToolOutcome(
        output=capped,
        error=None,
        error_kind=None,
        truncated=truncated,
        full_output=output if truncated else None,
    )
