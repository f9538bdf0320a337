"""OpenRath's ``rath.definition``: the authoring decorators plus the compiler's public face.

``step``, ``router``, ``RetryPolicy`` and ``EffectClass`` are the product's own
(``runs_app.authoring``, already OpenRath-compatible). :class:`WorkflowCompiler` and
:func:`compile_plan` give the product's compiled :class:`~runs_app.plan.Plan` OpenRath's shape
(``id``, ``definition_hash``, ``revision_id``, ``nodes``, ``durable``, ``definition``); the plan
*is* the product's (same hash the runs pin). A workflow with no ``@step`` methods compiles to a
one-node opaque, non-durable plan, as in OpenRath; the product's registry still refuses to run
it durably. Pure Python: no Django import.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import StrEnum

from runs_app.authoring import EffectClass, RetryPolicy, router, step
from runs_app.plan import Plan, PlanError, PlanNode, compile_workflow, declared_nodes
from sessions_app.workflow import Workflow, workflow_name

__all__ = [
    "CompiledPlan",
    "DefinitionError",
    "EffectClass",
    "NodeKind",
    "PlanDefinition",
    "PlanNodeView",
    "RetryPolicy",
    "WorkflowCompiler",
    "compile_plan",
    "router",
    "step",
]

#: A workflow definition that does not compile (the product's ``PlanError``, a ``ValueError``).
DefinitionError = PlanError

#: Namespace of plan ids: ``uuid5(namespace, "<definition hash>:<revision>")``.
_PLAN_NAMESPACE = uuid.UUID("5d0c6f3e-8a51-4f0e-9a59-2b7f1e0d4c11")


class NodeKind(StrEnum):
    STEP = "step"
    ROUTER = "router"
    #: The whole ``forward`` of a workflow without ``@step`` boundaries.
    OPAQUE = "opaque"


@dataclass(frozen=True)
class PlanNodeView:
    """One node of a compiled plan, typed as OpenRath types it."""

    id: str
    kind: NodeKind
    successors: tuple[str, ...]
    retry: RetryPolicy
    effects: EffectClass
    timeout_seconds: float | None
    checkpoint: bool

    @classmethod
    def of(cls, node: PlanNode) -> PlanNodeView:
        return cls(
            id=node.id,
            kind=NodeKind(node.kind),
            successors=tuple(node.successors),
            retry=node.retry,
            effects=node.effects,
            timeout_seconds=node.timeout_seconds,
            checkpoint=node.checkpoint,
        )


@dataclass(frozen=True)
class PlanDefinition:
    name: str
    version: str
    entrypoint: str


@dataclass(frozen=True)
class CompiledPlan:
    """A compiled workflow at a revision. ``plan`` is the product's plan (``None`` when the
    workflow has no durable boundaries)."""

    id: uuid.UUID
    definition_hash: str
    revision_id: uuid.UUID | None
    definition: PlanDefinition
    nodes: tuple[PlanNodeView, ...]
    durable: bool
    compatibility_issues: tuple[str, ...]
    plan: Plan | None

    def node(self, node_id: str) -> PlanNodeView:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)


def _plan_id(definition_hash: str, revision_id: uuid.UUID | None) -> uuid.UUID:
    return uuid.uuid5(_PLAN_NAMESPACE, f"{definition_hash}:{revision_id or ''}")


class WorkflowCompiler:
    """``WorkflowCompiler().compile(workflow, revision_id=...)``: deterministic, immutable."""

    def compile(
        self, workflow: Workflow | type[Workflow], *, revision_id: uuid.UUID | None = None
    ) -> CompiledPlan:
        cls = workflow if isinstance(workflow, type) else type(workflow)
        if not declared_nodes(cls):
            return self._opaque(cls, revision_id)
        plan = compile_workflow(cls)
        return CompiledPlan(
            id=_plan_id(plan.hash, revision_id),
            definition_hash=plan.hash,
            revision_id=revision_id,
            definition=PlanDefinition(name=plan.name, version=plan.version, entrypoint=plan.entry),
            nodes=tuple(PlanNodeView.of(node) for node in plan.nodes),
            durable=True,
            compatibility_issues=(),
            plan=plan,
        )

    @staticmethod
    def _opaque(cls: type[Workflow], revision_id: uuid.UUID | None) -> CompiledPlan:
        import hashlib

        name = workflow_name(cls)
        digest = hashlib.sha256(f"opaque:{name}".encode()).hexdigest()
        node = PlanNodeView(
            id="forward",
            kind=NodeKind.OPAQUE,
            successors=(),
            retry=RetryPolicy(),
            effects=EffectClass.NON_IDEMPOTENT,
            timeout_seconds=None,
            checkpoint=False,
        )
        return CompiledPlan(
            id=_plan_id(digest, revision_id),
            definition_hash=digest,
            revision_id=revision_id,
            definition=PlanDefinition(
                name=name, version=str(getattr(cls, "version", "1")), entrypoint="forward"
            ),
            nodes=(node,),
            durable=False,
            compatibility_issues=(
                "the workflow declares no @step boundaries: it has no checkpoint, so it runs "
                "eagerly (call it) and cannot be submitted to the durable runtime",
            ),
            plan=None,
        )


def compile_plan(
    workflow: Workflow | type[Workflow], *, revision_id: uuid.UUID | None = None
) -> CompiledPlan:
    """``WorkflowCompiler().compile(workflow, revision_id=revision_id)``."""
    return WorkflowCompiler().compile(workflow, revision_id=revision_id)
