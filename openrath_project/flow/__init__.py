"""The one import for users: ``from openrath_project import flow``.

Names are re-exported lazily, so importing this module does not need a configured Django until a
name is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Session": "sessions_app.value:Session",
    "ChunkView": "sessions_app.value:ChunkView",
    "SummaryResult": "sessions_app.services:SummaryResult",
    "Provider": "sessions_app.providers:make_provider",
    "tool": "sessions_app.tools:tool",
    "FlowToolCall": "sessions_app.tools:FlowToolCall",
    "ToolPolicy": "sessions_app.tools:ToolPolicy",
    "mcp_tools": "sessions_app.mcp:mcp_tools",
    "step": "runs_app.authoring:step",
    "router": "runs_app.authoring:router",
    "RetryPolicy": "runs_app.authoring:RetryPolicy",
    "EffectClass": "runs_app.authoring:EffectClass",
    "Workflow": "runs_app.workflow:Workflow",
    "InterruptRejected": "runs_app.control:InterruptRejected",
    "Decision": "runs_app.interrupts:Decision",
    "StepContext": "runs_app.executor:StepContext",
    "Agent": "sessions_app.agents:Agent",
    "Selector": "sessions_app.composition:Selector",
    "SelectorReplayError": "sessions_app.composition:SelectorReplayError",
    "Compressor": "sessions_app.compressor:Compressor",
}


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"openrath_project.flow has no attribute {name!r}")
    module_name, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
