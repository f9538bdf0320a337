"""The one import for users: ``from openrath_project import flow``.

Names are re-exported lazily, so importing this module does not need a configured Django; the
first name used configures it in a plain script (zero set-up: see ``openrath_project.library``).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Session": "sessions_app.value:Session",
    "ChunkView": "sessions_app.value:ChunkView",
    "SummaryResult": "sessions_app.services:SummaryResult",
    "Provider": "sessions_app.providers:ProviderFactory",
    "tool": "sessions_app.tools:tool",
    "FlowToolCall": "sessions_app.tools:FlowToolCall",
    "ToolPolicy": "sessions_app.tools:ToolPolicy",
    "mcp_tools": "sessions_app.mcp:mcp_tools",
    "step": "runs_app.authoring:step",
    "router": "runs_app.authoring:router",
    "RetryPolicy": "runs_app.authoring:RetryPolicy",
    "EffectClass": "runs_app.authoring:EffectClass",
    "Workflow": "sessions_app.workflow:Workflow",
    "InterruptRejected": "runs_app.control:InterruptRejected",
    "Decision": "runs_app.interrupts:Decision",
    "StepContext": "runs_app.executor:StepContext",
    "Agent": "sessions_app.agents:Agent",
    "Selector": "sessions_app.composition:Selector",
    "SelectorReplayError": "sessions_app.composition:SelectorReplayError",
    "Compressor": "sessions_app.compressor:Compressor",
    "EmptyWorkflow": "sessions_app.composition:EmptyWorkflow",
    "AgentParam": "sessions_app.workflow:AgentParam",
    "CompiledWorkflow": "runs_app.static_compile:CompiledWorkflow",
    "ResourceManifest": "runs_app.static_compile:ResourceManifest",
    # The durable runtime with OpenRath's names (openrath_project.runtime; docs: 'Durable runtime').
    "LocalRuntime": "openrath_project.runtime.local:LocalRuntime",
    "RunStore": "openrath_project.runtime.store:RunStore",
    "SQLiteRunStore": "openrath_project.runtime.store:SQLiteRunStore",
    "PostgresRunStore": "openrath_project.runtime.store:PostgresRunStore",
    "EffectLedger": "openrath_project.runtime.effects:EffectLedger",
    "SQLiteEffectLedger": "openrath_project.runtime.effects:SQLiteEffectLedger",
    "PostgresEffectLedger": "openrath_project.runtime.effects:PostgresEffectLedger",
    "arguments_digest": "openrath_project.runtime.effects:arguments_digest",
    "RunStatus": "openrath_project.runtime.models:RunStatus",
    "Run": "openrath_project.runtime.models:Run",
    "Checkpoint": "openrath_project.runtime.models:Checkpoint",
    "InterruptKind": "openrath_project.runtime.models:InterruptKind",
    "ApprovalDecision": "openrath_project.runtime.models:ApprovalDecision",
    "ApprovalDecisionKind": "openrath_project.runtime.models:ApprovalDecisionKind",
    "InvocationStatus": "openrath_project.runtime.models:InvocationStatus",
    "ConflictError": "openrath_project.runtime.models:ConflictError",
    "PlanMismatchError": "openrath_project.runtime.models:PlanMismatchError",
    "InvalidRunTransition": "openrath_project.runtime.models:InvalidRunTransition",
    "assert_transition": "openrath_project.runtime.models:assert_transition",
    "RunContext": "openrath_project.context:RunContext",
    "SecurityContext": "openrath_project.security:SecurityContext",
    "Principal": "openrath_project.security:Principal",
    "PrincipalKind": "openrath_project.security:PrincipalKind",
    "NodeKind": "openrath_project.definition:NodeKind",
    "WorkflowCompiler": "openrath_project.definition:WorkflowCompiler",
    "compile_plan": "openrath_project.definition:compile_plan",
    "DefinitionError": "openrath_project.definition:DefinitionError",
    # A client of a remote server's /api/v1 (docs/api.md, "Remote client"): needs no Django.
    "RemoteClient": "openrath_project.client.remote:RemoteClient",
    "AsyncRemoteClient": "openrath_project.client.remote:AsyncRemoteClient",
}
#: Names that need no local set-up: using them does not configure Django.
_NO_SETUP = frozenset({"RemoteClient", "AsyncRemoteClient"})


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        # OpenRath names left out on purpose get one error naming the alternative.
        from openrath_project.compat import missing_name

        raise missing_name(__name__, name)
    if name not in _NO_SETUP:
        # A plain script configures Django here, on first use (openrath_project.library).
        from openrath_project.library import ensure_ready

        ensure_ready()
    module_name, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
