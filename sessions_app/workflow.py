"""The ``Workflow`` base class users subclass (``flow.Workflow``), workflow identity, and the
call path every eager workflow call is tagged with.

Like ``torch.nn.Module`` (and OpenRath's ``rath.flow.Workflow``), a workflow remembers the child
workflows assigned to its attributes. Durable workflows declare ``@step`` / ``@router`` methods
and are compiled by :func:`runs_app.plan.compile_workflow`; eager ones implement ``forward``.
Agents, selectors and compressors (this app) are workflows too, so the base class lives here,
below the runs app.

Differences from OpenRath 2.0, on purpose:

- ``name`` (class attribute) names the workflow for the registry and the API; without it the
  identity is OpenRath's ``"{module}.{qualname}"``;
- a ``description`` class attribute is kept: ``__init__`` only overrides it when given one.

``named_children()`` and ``named_agents()`` are sorted by attribute name, as OpenRath's are
(``nn.Module`` keeps assignment order).

``AgentParam`` (OpenRath's: an agent prompt session, a provider and a memory binding) attributes
are remembered too, so ``compile()`` (``runs_app.static_compile``) can list every provider a
workflow can reach before it runs.

``compile()``, ``compile_plan()`` and ``inspect_resources()`` are OpenRath's methods, but what
they call lives above this module (the runs app's static pass, ``openrath_project.definition``):
they go through the :class:`Compiler` port, which the shell installs when Django starts
(``openrath_project.server.apps``; ``from openrath_project import flow`` starts Django).

Pure Python: no Django import.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from sessions_app import context

__all__ = [
    "MAX_WORKFLOW_PATH",
    "AgentParam",
    "Compiler",
    "Workflow",
    "install_compiler",
    "installed_compiler",
    "route_name",
    "workflow_call",
    "workflow_name",
    "workflow_path",
]

#: ``Session.workflow`` / ``LineageEdge.workflow`` hold at most this many characters.
MAX_WORKFLOW_PATH = 300


def _indented(body: str) -> str:
    return body.replace("\n", "\n  ")


@dataclass
class AgentParam:
    """OpenRath's ``AgentParam``: what one model-backed component needs — its agent prompt
    session (``Session.from_agent_prompt(...)``; ``None`` for a ``flow.Agent``, which keeps its
    prompt as text), its provider, and its memory binding (``None`` when it has none)."""

    agent_session: Any = None
    provider: Any = None
    memory: Any = None

    def to(
        self, target: Any = None, *, provider: str | None = None, model: str | None = None
    ) -> AgentParam:
        """Rebind the provider (chainable): ``to(Provider(...))`` or ``to(model="m")`` (a new
        provider of the same kind with that model). Config presets (``provider="name"``) are
        read from OpenRath's ``config.json``."""
        from sessions_app.providers import ProviderFactory, make_provider
        from sessions_app.providers.openrath_config import load_openrath_config

        if target is not None and provider is not None:
            raise ValueError("pass either a Provider positionally or provider=, not both")
        if target is not None:
            if not isinstance(target, ProviderFactory):
                raise TypeError(
                    "AgentParam.to() takes a Provider; use provider='name' for a config preset"
                )
            self.provider = target
        elif provider is not None:
            entry = load_openrath_config().llm_provider(provider)
            self.provider = make_provider(
                provider_kind=entry.provider_kind,
                model=model or entry.model,
                api_key=entry.api_key,
                base_url=entry.base_url,
                temperature=entry.temperature,
            )
            return self
        if model is not None:
            kind = getattr(self.provider, "kind", None) or "openai"
            self.provider = make_provider(kind=kind, model=model)
        elif target is None:
            raise ValueError("nothing to bind: pass a Provider, provider=<name>, or model=")
        return self

    def __repr__(self) -> str:
        lines = [
            "AgentParam(",
            f"  (agent_session): {_indented(repr(self.agent_session))}",
            f"  (provider): {self.provider!s}",
        ]
        if self.memory is not None:
            lines.append(f"  (memory): {self.memory!r}")
        lines.append(")")
        return "\n".join(lines)


class Workflow:
    """Base class of every workflow: durable (``@step`` methods), eager (``forward``), or both."""

    name: ClassVar[str | None] = None
    description: str = ""
    workflow_version: str = "1"
    #: JSON Schemas of the submitted state and of every state a step returns (as OpenRath's);
    #: part of the compiled plan. ``None``: not checked.
    input_schema: ClassVar[dict[str, Any] | None] = None
    state_schema: ClassVar[dict[str, Any] | None] = None

    _children: dict[str, Workflow]
    _agents: dict[str, AgentParam]

    def __init__(self, description: str | None = None) -> None:
        if "_children" not in self.__dict__:
            object.__setattr__(self, "_children", {})
        if "_agents" not in self.__dict__:
            object.__setattr__(self, "_agents", {})
        if description is not None:
            self.description = description

    def _child_registry(self) -> dict[str, Workflow]:
        # Subclasses that forget super().__init__() still track their children.
        children: dict[str, Workflow] | None = self.__dict__.get("_children")
        if children is None:
            children = {}
            object.__setattr__(self, "_children", children)
        return children

    def _agent_registry(self) -> dict[str, AgentParam]:
        agents: dict[str, AgentParam] | None = self.__dict__.get("_agents")
        if agents is None:
            agents = {}
            object.__setattr__(self, "_agents", agents)
        return agents

    def __setattr__(self, attr: str, value: Any) -> None:
        children = self._child_registry()
        agents = self._agent_registry()
        children.pop(attr, None)
        agents.pop(attr, None)
        if isinstance(value, Workflow):
            children[attr] = value
        elif isinstance(value, AgentParam):
            agents[attr] = value
        super().__setattr__(attr, value)

    def __delattr__(self, attr: str) -> None:
        self._child_registry().pop(attr, None)
        self._agent_registry().pop(attr, None)
        super().__delattr__(attr)

    def named_agents(self) -> tuple[tuple[str, AgentParam], ...]:
        """``(attribute, AgentParam)`` registered directly on this workflow, sorted by attribute
        name (as OpenRath lists them)."""
        return tuple(sorted(self._agent_registry().items(), key=lambda item: item[0]))

    def compile(self) -> Any:
        """OpenRath's static pass: a ``CompiledWorkflow`` (callable like this workflow) with the
        resource manifest of every reachable agent and the dynamic (``Selector``) nodes, and
        ``validate()``. Runs no model and reads or writes no session."""
        return installed_compiler("compile").compile(self)

    def compile_plan(self, *, revision_id: Any = None) -> Any:
        """OpenRath's durable plan of this workflow (``openrath_project.definition``)."""
        return installed_compiler("compile_plan").compile_plan(self, revision_id=revision_id)

    def inspect_resources(self) -> Any:
        """The resource manifest alone (``compile().manifest``)."""
        return installed_compiler("inspect_resources").inspect_resources(self)

    def named_children(self) -> tuple[tuple[str, Workflow], ...]:
        """``(attribute, child)`` for every child workflow, sorted by attribute name (as
        OpenRath lists them)."""
        return tuple(sorted(self._child_registry().items(), key=lambda item: item[0]))

    def children(self) -> Iterator[Workflow]:
        """The child workflows, sorted by attribute name."""
        for _attr, child in self.named_children():
            yield child

    def modules(self) -> list[Workflow]:
        """This workflow followed by every descendant (pre-order, depth-first)."""
        found: list[Workflow] = [self]
        for child in self.children():
            found.extend(child.modules())
        return found

    def forward(self, session: Any) -> Any:
        """Eager composition: transform ``session`` and return the resulting session."""
        raise NotImplementedError(
            f"{type(self).__qualname__}.forward(session) is not implemented: define "
            "forward(self, session) to call this workflow eagerly, or start a durable run "
            "of its @step methods"
        )

    def __call__(self, session: Any) -> Any:
        """Run ``forward`` tagged with this workflow's call path (``Outer/Inner``): the
        sessions, edges and chunks written inside record which workflow produced them."""
        return workflow_call(self, session)

    def __repr__(self) -> str:
        entries: list[tuple[str, Any]] = [*self.named_agents(), *self.named_children()]
        if not entries:
            return f"{type(self).__name__}()"
        lines = [f"{type(self).__name__}("]
        for attr, child in entries:
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({attr}): {body}")
        lines.append(")")
        return "\n".join(lines)


def workflow_name(workflow: type | object) -> str:
    """The workflow's identity: its ``name`` attribute if set, else ``"{module}.{qualname}"``.

    Accepts the class or an instance; the name is always read from the class.
    """
    cls = workflow if isinstance(workflow, type) else type(workflow)
    declared = getattr(cls, "name", None)
    if declared is None:
        return f"{cls.__module__}.{cls.__qualname__}"
    if not isinstance(declared, str) or not declared.strip():
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__}.name must be a non-empty string, got {declared!r}"
        )
    if declared != declared.strip():
        raise ValueError(
            f"{cls.__module__}.{cls.__qualname__}.name must not start or end with "
            f"whitespace: {declared!r}"
        )
    return declared


# --- Workflow calls ----------------------------------------------------------------------------


def route_name(target: Any) -> str:
    """The short name of a workflow (its ``name`` attribute, else its class name), an agent
    (``agent.name``) or a plain function (``__name__``)."""
    own = getattr(target, "__dict__", {}).get("name")
    if isinstance(own, str) and own.strip():  # agents, selectors: named per instance
        return own
    if isinstance(target, Workflow):
        declared = getattr(type(target), "name", None)
        return type(target).__name__ if declared is None else workflow_name(target)
    name = getattr(target, "name", None)
    if isinstance(name, str) and name.strip():
        return name
    function_name = getattr(target, "__name__", None)
    if isinstance(function_name, str):
        return function_name
    return type(target).__name__


def workflow_path(outer: str, name: str) -> str:
    """``outer/name`` (``name`` at the top); a path longer than the column keeps its tail."""
    path = f"{outer}/{name}" if outer else name
    if len(path) > MAX_WORKFLOW_PATH:
        path = "…" + path[-(MAX_WORKFLOW_PATH - 1) :]
    return path


def workflow_call(workflow: Workflow, session: Any) -> Any:
    """Run ``workflow.forward(session)`` tagged with the workflow's call path.

    The outer path comes from the write context, so nested calls give ``Outer/Inner``; the rest
    of the context (agent, run, step, fence, decisions) is kept.
    """
    path = workflow_path(context.current().workflow, route_name(workflow))
    with context.writing(workflow=path):
        return workflow.forward(session)


# --- The compiler port ---------------------------------------------------------------------------


class Compiler(Protocol):
    """What ``Workflow.compile()``, ``compile_plan()`` and ``inspect_resources()`` call: the
    runs app's static pass and OpenRath's plan compiler, both above this module. The shell
    installs one when Django starts (``openrath_project.server.apps``)."""

    def compile(self, workflow: Workflow) -> Any: ...

    def compile_plan(self, workflow: Workflow, *, revision_id: Any) -> Any: ...

    def inspect_resources(self, workflow: Workflow) -> Any: ...


_compiler: Compiler | None = None


def install_compiler(compiler: Compiler) -> None:
    """Make ``compiler`` the one every workflow's ``compile()`` family calls (replaces any)."""
    global _compiler
    _compiler = compiler


def installed_compiler(operation: str) -> Compiler:
    """The installed compiler; a ``RuntimeError`` saying how to get one when there is none."""
    if _compiler is None:
        raise RuntimeError(
            f"Workflow.{operation}() needs the workflow compiler, which is installed when "
            "Django starts (the openrath_project.server app): use workflows through "
            "`from openrath_project import flow` (its first use starts Django), or call "
            "django.setup() first"
        )
    return _compiler
