"""Who is writing: the agent, run, step and fence of the code currently touching sessions.

Agents and the durable runtime set this context; every chunk and session written inside it is
tagged with it, so "which branch, agent, run, step and tool call produced this chunk" can be
answered from the data. Kept in :mod:`contextvars` so it follows threads' and tasks' own flows.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol


@dataclass(frozen=True)
class Fence:
    """Appends made under this fence succeed only while the run still holds this token."""

    run_id: uuid.UUID
    token: int


class DecisionStore(Protocol):
    """Where routing decisions are remembered so a replay reuses them (a durable run's ledger)."""

    def recall(self, key: str) -> Any | None: ...

    def record(self, key: str, value: Any) -> None: ...


@dataclass(frozen=True)
class WriteContext:
    actor: str = "flow"
    agent: str = ""
    #: The workflow path (``outer/inner``) of the eager workflow being called.
    workflow: str = ""
    run_id: uuid.UUID | None = None
    step: str = ""
    fence: Fence | None = None
    #: Default project for ``flow.Session`` constructors (a Project instance).
    project: Any = None
    #: Inside a durable run: recorded decisions (selectors) reused when a step is replayed.
    decisions: DecisionStore | None = None


_current: contextvars.ContextVar[WriteContext] = contextvars.ContextVar(
    "openrath_write_context",
    default=WriteContext(),  # noqa: B039 - a frozen dataclass: never mutated, only replaced
)


def current() -> WriteContext:
    return _current.get()


@contextmanager
def writing(**changes: Any) -> Iterator[WriteContext]:
    """Set context fields (agent, workflow, run_id, step, fence, actor, project, decisions)."""
    ctx = replace(_current.get(), **changes)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)
