"""Who is writing: the agent, run, step and fence of the code currently touching sessions.

Agents and the durable runtime set this context; every chunk and session written inside it is
tagged with it, so "which branch, agent, run, step and tool call produced this chunk" can be
answered from the data. Kept in :mod:`contextvars` so it follows threads' and tasks' own flows.
"""

from __future__ import annotations

import contextvars
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sessions_app.providers.base import ModelTurn, ToolCallRequest
    from sessions_app.tools.dispatch import ToolOutcome


@dataclass(frozen=True)
class Fence:
    """Appends made under this fence succeed only while the run still holds this token."""

    run_id: uuid.UUID
    token: int


class DecisionStore(Protocol):
    """Where routing decisions are remembered so a replay reuses them (a durable run's ledger)."""

    def recall(self, key: str) -> Any | None: ...

    def record(self, key: str, value: Any) -> None: ...


class CallSource(Protocol):
    """Answers an agent's model and tool calls from a record instead of the world.

    Set as :attr:`WriteContext.recorded` (a replay sets it for the steps it re-executes);
    ``flow.Agent`` then asks it for each model answer instead of calling its provider, and
    for each tool result before running the tool. ``agent`` is the calling ``flow.Agent``;
    ``messages`` and ``schemas`` are exactly what the provider would have been sent.
    """

    def model_turn(
        self,
        agent: Any,
        session: Any,
        messages: list[dict[str, Any]],
        schemas: list[dict[str, Any]] | None,
        turn_number: int,
    ) -> ModelTurn:
        """The model's answer to this call (raise to make the call fail)."""
        ...

    def tool_result(self, agent: Any, session: Any, call: ToolCallRequest) -> ToolOutcome | None:
        """The outcome of this tool call, or ``None`` to let the agent run the tool itself."""
        ...


class StepBuffer:
    """Chunks a durable step appends to its run's working session, held until the step
    commits, so the chunks, the checkpoint and the event are written by one statement.

    Held chunks are written earlier when someone reads that session in the step (reads see
    their own writes), when the oldest is older than ``flush_after`` seconds (a long agent step
    still shows up live), and when the attempt ends without committing (so an abandoned
    attempt stays visible in lineage).
    """

    def __init__(
        self, session_id: uuid.UUID, tenant_id: uuid.UUID, length: int, *, flush_after: float = 0.5
    ) -> None:
        self.session_id = session_id
        self.tenant_id = tenant_id
        #: The session's stored length (what the buffer's first chunk follows).
        self.stored_length = length
        self.flush_after = flush_after
        self.drafts: list[Any] = []
        self._oldest: float | None = None

    @property
    def next_seq(self) -> int:
        return self.stored_length + len(self.drafts)

    def add(self, drafts: list[Any]) -> int:
        """Hold ``drafts``; returns the seq of the first."""
        first = self.next_seq
        if self._oldest is None:
            self._oldest = time.monotonic()
        self.drafts.extend(drafts)
        return first

    def due(self) -> bool:
        return self._oldest is not None and time.monotonic() - self._oldest >= self.flush_after

    def take(self) -> list[Any]:
        """The held drafts, now the caller's to write; the buffer is empty afterwards."""
        drafts, self.drafts, self._oldest = self.drafts, [], None
        self.stored_length += len(drafts)
        return drafts


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
    #: Inside a durable step: appends to the working session, held until the step commits.
    buffer: StepBuffer | None = None
    #: Inside a durable step: ``ctx.effect`` (writing tools run through the effect ledger).
    effects: Callable[..., Any] | None = None
    #: Inside a durable step with a budget: checks it (an approval interrupt when exceeded).
    budget: Callable[[], None] | None = None
    #: Where agents' model answers and tool results come from instead of the provider and the
    #: tools (a replay's record); ``None`` on the live path.
    recorded: CallSource | None = None


_current: contextvars.ContextVar[WriteContext] = contextvars.ContextVar(
    "openrath_write_context",
    default=WriteContext(),  # noqa: B039 - a frozen dataclass: never mutated, only replaced
)


def current() -> WriteContext:
    return _current.get()


@contextmanager
def writing(**changes: Any) -> Iterator[WriteContext]:
    """Set context fields (agent, workflow, run_id, step, fence, actor, project, decisions,
    buffer, effects, budget, recorded)."""
    ctx = replace(_current.get(), **changes)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)
