"""Tools: ``FlowToolCall``, the ``@tool`` decorator, the dispatcher, the policy and built-ins."""

from __future__ import annotations

from sessions_app.tools.base import FlowToolCall
from sessions_app.tools.builtin import BUILTIN_TOOLS, SYSTEM_TOOLS
from sessions_app.tools.decorator import FunctionTool, tool
from sessions_app.tools.dispatch import ToolOutcome, dispatch_tool
from sessions_app.tools.policy import CallCounter, ToolPolicy, ToolPolicyViolation

__all__ = [
    "BUILTIN_TOOLS",
    "CallCounter",
    "FlowToolCall",
    "FunctionTool",
    "ToolOutcome",
    "ToolPolicy",
    "SYSTEM_TOOLS",
    "ToolPolicyViolation",
    "dispatch_tool",
    "tool",
]
