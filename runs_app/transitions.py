"""The run lifecycle: statuses and the one table of allowed transitions.

``queued -> running -> {waiting, needs_review, succeeded, failed, cancelled, timed_out}``;
``waiting -> queued`` when an interrupt is resolved or a timer fires; ``needs_review -> queued``
on an operator decision; ``running -> queued`` when a retry is scheduled or a lease is given up.
OpenRath 2.0's table plus ``queued -> failed`` (a run that cannot start, e.g. its workflow is no
longer registered). Terminal statuses have no way out.

The service that applies a transition does it with a compare-and-set on the current status
and writes the run event in the same transaction; this module only says what is allowed.
Pure Python: no Django import.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from openrath_project.errors import IllegalTransition

__all__ = [
    "ACTIVE",
    "STATUSES",
    "TERMINAL",
    "TRANSITIONS",
    "IllegalTransition",
    "RunStatus",
    "can_transition",
    "check_transition",
    "is_terminal",
]


class RunStatus(StrEnum):
    """Where a run is in its lifecycle (the workflow's data is its ``state``, not this)."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    NEEDS_REVIEW = "needs_review"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


#: Every status, in lifecycle order.
STATUSES: Final[tuple[str, ...]] = tuple(status.value for status in RunStatus)


def _values(*statuses: RunStatus) -> frozenset[str]:
    # Plain strings, so the table reads (and serialises) the same as the database column.
    return frozenset(status.value for status in statuses)


_S = RunStatus

TERMINAL: Final[frozenset[str]] = _values(_S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.TIMED_OUT)

#: Statuses a run can still leave: it counts against queues and can be cancelled.
ACTIVE: Final[frozenset[str]] = frozenset(STATUSES) - TERMINAL

TRANSITIONS: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        _S.QUEUED.value: _values(_S.RUNNING, _S.CANCELLED, _S.TIMED_OUT, _S.FAILED),
        _S.RUNNING.value: _values(
            _S.QUEUED,
            _S.WAITING,
            _S.NEEDS_REVIEW,
            _S.SUCCEEDED,
            _S.FAILED,
            _S.CANCELLED,
            _S.TIMED_OUT,
        ),
        _S.WAITING.value: _values(_S.QUEUED, _S.CANCELLED, _S.TIMED_OUT, _S.FAILED),
        _S.NEEDS_REVIEW.value: _values(_S.QUEUED, _S.FAILED, _S.CANCELLED),
        **{status: frozenset() for status in STATUSES if status in TERMINAL},
    }
)


def _status(value: str) -> str:
    """The plain string value of a status; ``ValueError`` for a name outside the lifecycle."""
    try:
        return RunStatus(value).value
    except ValueError:
        raise ValueError(
            f"unknown run status {value!r}; expected one of: {', '.join(STATUSES)}"
        ) from None


def can_transition(current: str, target: str) -> bool:
    """Whether the table allows ``current -> target`` (unknown statuses are a ``ValueError``)."""
    return _status(target) in TRANSITIONS[_status(current)]


def check_transition(current: str, target: str) -> None:
    """Raise ``IllegalTransition`` unless the table allows ``current -> target``."""
    if not can_transition(current, target):
        raise IllegalTransition(
            f"illegal run transition from {_status(current)!r} to {_status(target)!r}",
            details={"from": _status(current), "to": _status(target)},
        )


def is_terminal(status: str) -> bool:
    return _status(status) in TERMINAL
