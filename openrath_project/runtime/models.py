"""The durable runtime's values, typed as OpenRath's ``rath.runtime`` types them.

Immutable snapshots of stored rows (built by the store, ``openrath_project.runtime.store``):
:class:`Run`, :class:`Checkpoint`, :class:`RunEvent`, :class:`Interrupt`, :class:`Invocation`;
the enums :class:`RunStatus` (the product's own, so ``run.status is RunStatus.SUCCEEDED``
holds), :class:`InterruptKind`, :class:`ApprovalDecisionKind`, :class:`InvocationStatus`; and the
errors. Pure Python: no Django import (the builders take rows duck-typed).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from openrath_project.errors import Conflict, IllegalTransition
from runs_app.plan import PlanError
from runs_app.transitions import RunStatus, check_transition

__all__ = [
    "ApprovalDecision",
    "ApprovalDecisionKind",
    "Checkpoint",
    "ConflictError",
    "Interrupt",
    "InterruptKind",
    "InvalidRunTransition",
    "Invocation",
    "InvocationStatus",
    "PlanMismatchError",
    "Run",
    "RunEvent",
    "RunStatus",
    "SchemaValidationError",
    "UnsupportedOperation",
    "assert_transition",
    "freeze",
    "thaw",
]

#: A write refused because the stored row moved on (version, fencing token, idempotency key).
ConflictError = Conflict
#: A status change the lifecycle table does not allow.
InvalidRunTransition = IllegalTransition


class PlanMismatchError(Conflict):
    """The run's pinned plan is not the registered workflow's plan. The product does not fail
    the run: it parks it in ``needs_review`` (stronger than OpenRath's fail-closed); this is
    raised where a caller asks for the strict check."""

    code = "plan_mismatch"


class SchemaValidationError(ValueError):
    """A submitted input or a checkpointed state does not match the workflow's schema."""


class UnsupportedOperation(NotImplementedError):
    """An OpenRath store call this product does not offer, with what to use instead."""

    def __init__(self, operation: str, reason: str, alternative: str) -> None:
        self.operation = operation
        super().__init__(
            f"{operation} is not supported: {reason}. Use instead: {alternative}. "
            "See docs/migrating-from-openrath.md, 'Durable runtime'."
        )


def assert_transition(source: RunStatus | str, target: RunStatus | str) -> None:
    """``InvalidRunTransition`` unless the lifecycle allows ``source -> target``."""
    check_transition(str(source), str(target))


def freeze(value: Any) -> Any:
    """A deep, read-only copy: mappings become ``MappingProxyType``, lists tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(item) for item in value)
    return copy.deepcopy(value)


def thaw(value: Any) -> Any:
    """The plain JSON-able form of a :func:`freeze`-d value."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(item) for item in value]
    return value


class InterruptKind(StrEnum):
    APPROVAL = "approval"
    INPUT = "input"
    REVIEW = "review"


class ApprovalDecisionKind(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    #: Approve with a changed request: stored as ``edit`` with the payload (the edited request).
    EDIT = "edit"
    RESPOND = "respond"


#: OpenRath decision kind -> the product's stored decision.
DECISION_OF_KIND: Mapping[ApprovalDecisionKind, str] = MappingProxyType(
    {
        ApprovalDecisionKind.APPROVE: "approve",
        ApprovalDecisionKind.REJECT: "reject",
        ApprovalDecisionKind.EDIT: "edit",
        ApprovalDecisionKind.RESPOND: "respond",
    }
)


@dataclass(frozen=True)
class ApprovalDecision:
    """A person's decision on an interrupt."""

    kind: ApprovalDecisionKind
    actor_id: str
    reason: str = ""
    payload: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ApprovalDecisionKind(self.kind))
        if not self.actor_id:
            raise ValueError("a decision needs the actor_id of who decided")


class InvocationStatus(StrEnum):
    """OpenRath's effect states; the product's ``started`` is ``DISPATCHED``, its
    ``needs_review`` is ``AMBIGUOUS``."""

    PREPARED = "prepared"
    DISPATCHED = "dispatched"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"
    RESOLVED = "resolved"


INVOCATION_STATUS_OF: Mapping[str, InvocationStatus] = MappingProxyType(
    {
        "prepared": InvocationStatus.PREPARED,
        "started": InvocationStatus.DISPATCHED,
        "succeeded": InvocationStatus.SUCCEEDED,
        "failed": InvocationStatus.FAILED,
        "needs_review": InvocationStatus.AMBIGUOUS,
        "resolved": InvocationStatus.RESOLVED,
    }
)


def _status(value: str) -> RunStatus:
    return RunStatus(value)


@dataclass(frozen=True)
class Run:
    """A run as stored. ``version`` counts the run's stored changes since it was created (0 for
    a new run, as in OpenRath): every change appends an event, so it is the run's event
    sequence less its ``run.created`` event, and the optimistic-concurrency version
    (``expected_version=``)."""

    id: uuid.UUID
    status: RunStatus
    tenant_id: str
    workflow: str
    plan_id: str
    session_id: uuid.UUID | None
    state: Mapping[str, Any]
    next_nodes: tuple[str, ...]
    version: int
    priority: int = 0
    attempt: int = 1
    revision_id: uuid.UUID | None = None
    project: str = "default"
    error: Mapping[str, Any] | None = None
    output: Any = None
    lease_owner: str = ""
    lease_expires_at: datetime | None = None
    fencing_token: int = 0
    deadline: datetime | None = None
    idempotency_key: str | None = None
    created_by: str = ""
    created_at: datetime | None = None
    finished_at: datetime | None = None

    @classmethod
    def create(
        cls,
        *,
        plan_id: Any,
        revision_id: uuid.UUID | None = None,
        session_id: uuid.UUID | None = None,
        tenant_id: str,
        status: RunStatus | str = RunStatus.QUEUED,
        state: Mapping[str, Any] | None = None,
        next_nodes: tuple[str, ...] = (),
        priority: int = 0,
        workflow: str = "",
        idempotency_key: str | None = None,
    ) -> Run:
        """An unsaved run value (OpenRath's constructor); stored runs come from
        ``LocalRuntime.submit`` (the store refuses to insert a run with no workflow)."""
        return cls(
            id=uuid.uuid4(),
            status=_status(str(status)),
            tenant_id=tenant_id,
            workflow=workflow,
            plan_id=str(plan_id),
            session_id=session_id,
            state=freeze(dict(state or {})),
            next_nodes=tuple(next_nodes),
            version=0,
            priority=priority,
            revision_id=revision_id,
            idempotency_key=idempotency_key,
        )

    @classmethod
    def of(cls, row: Any, *, tenant_slug: str, project_slug: str, state: Any) -> Run:
        """The value of a stored ``runs_app.models.Run`` row."""
        return cls(
            id=row.id,
            status=_status(row.status),
            tenant_id=tenant_slug,
            workflow=row.workflow,
            plan_id=row.plan_id,
            session_id=row.session_id,
            state=freeze(state),
            next_nodes=tuple(row.next_nodes or ()),
            version=row.event_seq - 1,
            priority=row.priority,
            attempt=row.attempt,
            project=project_slug,
            error=freeze(row.error) if row.error else None,
            output=freeze(row.output),
            lease_owner=row.lease_owner,
            lease_expires_at=row.lease_expires_at,
            fencing_token=row.fencing_token,
            deadline=row.deadline,
            idempotency_key=row.idempotency_key,
            created_by=row.created_by,
            created_at=row.created_at,
            finished_at=row.finished_at,
        )

    @property
    def terminal(self) -> bool:
        return self.status in (
            RunStatus.SUCCEEDED,
            RunStatus.FAILED,
            RunStatus.CANCELLED,
            RunStatus.TIMED_OUT,
        )


@dataclass(frozen=True)
class Checkpoint:
    """A committed step: ``sequence`` (1, 2, ...), the ``state`` after it (a value, not a
    delta), the ``next_nodes`` it leads to (a tuple; ``()`` when the run ended)."""

    run_id: uuid.UUID
    sequence: int
    step: str
    state: Mapping[str, Any]
    next_nodes: tuple[str, ...]
    plan_hash: str
    attempt: int
    fencing_token: int
    effect_watermark: int
    created_at: datetime | None = None

    @classmethod
    def create(cls, **_: Any) -> Checkpoint:
        raise UnsupportedOperation(
            "Checkpoint.create / RunStore.append_checkpoint",
            "checkpoints are written only by the worker holding the run's lease, in the same "
            "transaction as the step's result",
            "run the step: LocalRuntime.work_once()",
        )


@dataclass(frozen=True)
class RunEvent:
    """A run event: ``type`` in OpenRath's naming, ``product_type`` as stored."""

    run_id: uuid.UUID
    sequence: int
    type: str
    product_type: str
    step: str
    data: Mapping[str, Any]
    created_at: datetime | None = None


@dataclass(frozen=True)
class Interrupt:
    """A pause for a person's decision."""

    id: uuid.UUID
    run_id: uuid.UUID
    tenant_id: str
    kind: InterruptKind
    step: str
    request: Mapping[str, Any]
    request_digest: str
    status: str
    decision: str
    response: Any
    reason: str
    decided_by: str
    expires_at: datetime | None
    created_at: datetime | None

    @property
    def pending(self) -> bool:
        return self.status == "pending"


@dataclass(frozen=True)
class Invocation:
    """An effect-ledger entry (a tool or side effect recorded at most once)."""

    id: uuid.UUID
    run_id: uuid.UUID
    step: str
    tool_name: str
    idempotency_key: str | None
    effect_class: str
    arguments_digest: str
    status: InvocationStatus
    result: Any
    error: Any
    attempts: int


def plan_error_type() -> type[Exception]:
    """The definition error raised by compiling (``DefinitionError``)."""
    return PlanError
