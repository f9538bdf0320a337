"""``Workflow.compile()``: OpenRath's static pass over a workflow's module tree.

It walks the tree of child workflows (attributes holding a ``flow.Workflow``, ``flow.Agent``,
``flow.Selector`` or ``flow.Compressor``) and their ``AgentParam`` attributes, and returns a
:class:`CompiledWorkflow` holding a :class:`ResourceManifest`: every reachable agent with its
provider and whether memory is bound, and every ``Selector`` as a *dynamic* node — which
workflow it picks is the model's decision at run time, so its targets are never guessed.
Compiling runs no model, opens no sandbox and reads or writes no session.

``validate()`` checks, offline, that each provider's kind is registered and that a credential
would resolve for it (the in-process key, the environment variable or the config file).

A durable workflow (``@step`` methods) also gets its plan: ``execution_plan`` is what
``runs_app.plan.compile_workflow`` builds; ``None`` for an eager-only workflow.

Pure Python: no Django import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from sessions_app.composition import Selector
from sessions_app.workflow import AgentParam, Workflow

__all__ = [
    "AgentResource",
    "CompiledWorkflow",
    "DynamicNode",
    "ResourceManifest",
    "collect_manifest",
]

SELECTOR_REASON = (
    "Selector routes to a workflow chosen by the model at runtime; "
    "successor set is not statically known"
)


@dataclass(frozen=True)
class AgentResource:
    """One reachable ``AgentParam``: its dotted path from the root (``team.triage.agent``)."""

    path: str
    provider: Any
    has_memory: bool
    agent_session_id: str


@dataclass(frozen=True)
class DynamicNode:
    """A node whose behaviour is decided at run time (``kind="selector"``)."""

    path: str
    kind: str
    reason: str


@dataclass
class ResourceManifest:
    """Everything a workflow can use, found statically."""

    agents: list[AgentResource] = field(default_factory=list)
    dynamic_nodes: list[DynamicNode] = field(default_factory=list)

    def provider_models(self) -> list[str]:
        """The distinct model names reachable, sorted."""
        return sorted({str(a.provider.model) for a in self.agents if _model(a.provider)})

    def provider_kinds(self) -> list[str]:
        """The distinct provider kinds reachable, sorted."""
        return sorted({_kind(a.provider) for a in self.agents})


def _model(provider: Any) -> str | None:
    model = getattr(provider, "model", None)
    return str(model) if model else None


def _kind(provider: Any) -> str:
    return str(getattr(provider, "kind", None) or "openai")


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _is_selector(node: Workflow) -> bool:
    return isinstance(node, Selector)


def _agent_resource(path: str, param: AgentParam) -> AgentResource:
    session = param.agent_session
    session_id = getattr(session, "id", None)
    return AgentResource(
        path=path,
        provider=param.provider,
        has_memory=param.memory is not None,
        agent_session_id=str(session_id) if session_id is not None else "",
    )


def collect_manifest(workflow: Workflow) -> ResourceManifest:
    """The manifest of ``workflow``'s tree: pre-order, each node's agents before its children,
    both sorted by attribute name. A Selector's own provider is collected; its targets are not."""
    manifest = ResourceManifest()
    seen: set[int] = set()

    def visit(node: Workflow, prefix: str) -> None:
        if id(node) in seen:  # the same object assigned twice is one resource
            return
        seen.add(id(node))
        if _is_selector(node):
            manifest.dynamic_nodes.append(
                DynamicNode(
                    path=prefix or type(node).__name__, kind="selector", reason=SELECTOR_REASON
                )
            )
        for name, param in node.named_agents():
            manifest.agents.append(_agent_resource(_join(prefix, name), param))
        for name, child in node.named_children():
            visit(child, _join(prefix, name))

    visit(workflow, "")
    return manifest


class CompiledWorkflow:
    """A workflow with its static manifest; calling it calls the workflow."""

    def __init__(self, workflow: Workflow) -> None:
        if not isinstance(workflow, Workflow):
            raise TypeError(f"compile() takes a flow.Workflow; got {type(workflow).__name__}")
        self.workflow = workflow
        self.manifest = collect_manifest(workflow)
        self.execution_plan = _plan_of(workflow)

    def __call__(self, session: Any) -> Any:
        return self.workflow(session)

    def named_children(self) -> tuple[tuple[str, Workflow], ...]:
        return self.workflow.named_children()

    def validate(self, *, raise_on_error: bool = False) -> list[str]:
        """Problems that would stop a run, found offline (no model call); empty when none.
        With ``raise_on_error=True`` a non-empty list is raised as one ``ValueError``."""
        from sessions_app.providers import registered_kinds

        kinds = set(registered_kinds())
        problems: list[str] = []
        for agent in self.manifest.agents:
            provider = agent.provider
            if provider is None:
                problems.append(f"agent {agent.path!r}: no provider is bound")
                continue
            kind = _kind(provider)
            if kind not in kinds:
                problems.append(
                    f"agent {agent.path!r}: unknown provider_kind={kind!r} "
                    f"(registered: {sorted(kinds)})"
                )
                continue
            check = getattr(provider, "credential_available", None)
            if callable(check) and not check():
                problems.append(
                    f"agent {agent.path!r}: no api credential resolves for "
                    f"provider_kind={kind!r} (set Provider.api_key, the vendor env var, or a "
                    "config provider)"
                )
        if raise_on_error and problems:
            raise ValueError(
                "workflow pre-flight validation failed:\n  - " + "\n  - ".join(problems)
            )
        return problems

    def __enter__(self) -> CompiledWorkflow:
        # Nothing to acquire: memory lives in the database and sandboxes open per session.
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def __repr__(self) -> str:
        return (
            f"CompiledWorkflow({self.workflow!r}, agents={len(self.manifest.agents)}, "
            f"dynamic_nodes={len(self.manifest.dynamic_nodes)})"
        )


def _plan_of(workflow: Workflow) -> Any:
    from runs_app.plan import compile_workflow, declared_nodes

    if not declared_nodes(type(workflow)):
        return None
    return compile_workflow(workflow)
