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
from typing import Any


@dataclass(frozen=True)
class Fence:
    """Appends made under this fence succeed only while the run still holds this token."""

    run_id: uuid.UUID
    token: int


@dataclass(frozen=True)
class WriteContext:
    actor: str = "flow"
    agent: str = ""
    run_id: uuid.UUID | None = None
    step: str = ""
    fence: Fence | None = None
    #: Default project for ``flow.Session`` constructors (a Project instance).
    project: Any = None


_current: contextvars.ContextVar[WriteContext] = contextvars.ContextVar(
    "openrath_write_context",
    default=WriteContext(),  # noqa: B039 - a frozen dataclass: never mutated, only replaced
)


def current() -> WriteContext:
    return _current.get()


@contextmanager
def writing(**changes: Any) -> Iterator[WriteContext]:
    """Set context fields (agent, run_id, step, fence, actor, project) for a block."""
    ctx = replace(_current.get(), **changes)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)
