"""Run event types: ours, and the name OpenRath 2.0's run store gives the same moment.

Our event types are a stored, streamed contract (the console, the WebSocket/SSE streams and
``GET /runs/{id}/events/`` read them as they are), so they are not renamed. OpenRath code that
reads a run's events (``store.list_run_events(run_id)``) looks for OpenRath's names instead:
:func:`openrath_event_type` gives that name for one of our events, and
``docs/migrating-from-openrath.md`` ("Run semantics") prints the table.

Where OpenRath has no event for a moment (our fan-out, session switches, operator resume of a
plan drift, a fork), the mapping says ``None``: an OpenRath consumer has nothing to expect there.
Pure Python: no Django import.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

__all__ = ["OPENRATH_EVENT_TYPES", "openrath_event_type"]

#: Our event type -> OpenRath 2.0's (``rath.runtime`` stores); ``None``: OpenRath has none.
OPENRATH_EVENT_TYPES: Final[Mapping[str, str | None]] = MappingProxyType(
    {
        "run.created": "run.created",
        "run.claimed": "run.claimed",
        # Every step.completed / router.decided event is written with the step's checkpoint.
        "step.completed": "run.checkpoint.created",
        "router.decided": "run.checkpoint.created",
        "step.retry_scheduled": "run.step.attempt.failed",
        "run.succeeded": "run.execution.completed",
        "run.failed": "run.execution.failed",
        # OpenRath ends a timed-out run with run.execution.failed (status timed_out); an
        # expired interrupt with run.interrupt.expired (see openrath_event_type).
        "run.timed_out": "run.execution.failed",
        "run.waiting": "run.interrupt.created",
        "interrupt.resolved": "run.interrupt.decided",
        "interrupt.expired": "run.interrupt.expired",
        "lease.expired": "run.lease.expired",
        # Status changes OpenRath records as run.state.changed (store.transition_run).
        "run.cancelled": "run.state.changed",
        "run.needs_review": "run.state.changed",
        "run.resumed": "run.state.changed",
        "lease.released": "run.state.changed",
        "effect.resolved": "run.tool_invocation.changed",
        # Ours only.
        "branches.started": None,
        "branches.joined": None,
        "session.switched": None,
        # Time travel (docs/time-travel.md): a fork's second event names its parent.
        "run.forked": None,
        "replay.finished": None,
    }
)


def openrath_event_type(event_type: str, data: Mapping[str, Any] | None = None) -> str | None:
    """OpenRath 2.0's name for one of our run events (``None`` when OpenRath has none).

    ``data`` refines the two moments one of our types covers several of: a run that ends
    ``timed_out`` because an interrupt expired is OpenRath's ``run.interrupt.expired``, and a
    ``run.waiting`` for a fan-out (no interrupt) has no OpenRath counterpart. Unknown types
    are returned unchanged (a type added later keeps its own name rather than vanishing).
    """
    if event_type == "run.timed_out" and (data or {}).get("type") == "InterruptExpired":
        return "run.interrupt.expired"
    if event_type == "run.waiting" and not (data or {}).get("interrupt"):
        return None
    if event_type in OPENRATH_EVENT_TYPES:
        return OPENRATH_EVENT_TYPES[event_type]
    return event_type
