"""Lifecycles: the statuses of runs, interrupts and effects, and one table of allowed
transitions for each.

Run: ``queued -> running -> {waiting, needs_review, succeeded, failed, cancelled, timed_out}``;
``waiting -> queued`` when an interrupt is resolved or a timer fires; ``needs_review -> queued``
on an operator decision; ``running -> queued`` when a retry is scheduled or a lease is given up.
OpenRath 2.0's table plus ``queued -> failed`` (a run that cannot start, e.g. its workflow is no
longer registered).

Interrupt: ``pending -> resolved`` (someone decided) or ``pending -> expired`` (nobody did in
time; the declared default, or a reject, stands in).

Effect (a ledger row): born ``prepared`` (or ``succeeded``: a recorded decision);
``prepared | failed | resolved -> started`` before each call; ``started -> prepared`` when an
idempotent effect is found started after a crash (it will be called again with the same
idempotency key, as OpenRath's "retryable"); ``started -> succeeded | failed`` when the
call returns or raises; ``started -> needs_review`` when a non-idempotent call may or may not
have happened; ``needs_review -> resolved`` on an operator's answer.

Terminal statuses have no way out. The services that apply a transition do it with a
compare-and-set on the current status (``run_transition`` for runs, ``ledger_transition`` for
interrupts and effects, both in :mod:`runs_app.services`) and write the run event in the same
transaction; this module only says what is allowed. Pure Python: no Django import.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from enum import Enum, StrEnum
from types import MappingProxyType
from typing import Any, Final

from openrath_project.errors import IllegalTransition

__all__ = [
    "ACTIVE",
    "EFFECT",
    "INTERRUPT",
    "RUN",
    "STATUSES",
    "TERMINAL",
    "TRANSITIONS",
    "UNSET",
    "Changes",
    "EffectStatus",
    "IllegalTransition",
    "InterruptStatus",
    "RunStatus",
    "StateMachine",
    "Unset",
    "can_transition",
    "check_transition",
    "is_terminal",
]


@dataclass(frozen=True)
class StateMachine:
    """One entity's lifecycle: its statuses, where rows are born, and the allowed moves.

    ``transitions`` maps every status to the statuses it may move to; a status with no way out
    is terminal. Statuses are plain strings, the values stored in the database column.
    """

    entity: str
    statuses: tuple[str, ...]
    initial: frozenset[str]
    transitions: Mapping[str, frozenset[str]]

    def __post_init__(self) -> None:
        known = set(self.statuses)
        if set(self.transitions) != known:
            raise ValueError(f"the {self.entity} table must list every status exactly once")
        for source, targets in self.transitions.items():
            if not targets <= known:
                raise ValueError(f"{self.entity} {source!r} moves to unknown statuses")
        if not self.initial <= known:
            raise ValueError(f"{self.entity} rows are born in unknown statuses")

    @property
    def terminal(self) -> frozenset[str]:
        return frozenset(s for s in self.statuses if not self.transitions[s])

    def status(self, value: str) -> str:
        """The plain string value of a status; ``ValueError`` for a name outside the lifecycle."""
        text = str(getattr(value, "value", value))
        if text not in self.transitions:
            raise ValueError(
                f"unknown {self.entity} status {text!r}; "
                f"expected one of: {', '.join(self.statuses)}"
            )
        return text

    def can(self, current: str, target: str) -> bool:
        """Whether the table allows ``current -> target`` (unknown statuses: ``ValueError``)."""
        return self.status(target) in self.transitions[self.status(current)]

    def check(self, current: str, target: str) -> None:
        """Raise :class:`IllegalTransition` (409) unless the table allows ``current -> target``."""
        if not self.can(current, target):
            source, wanted = self.status(current), self.status(target)
            raise IllegalTransition(
                f"illegal {self.entity} transition from {source!r} to {wanted!r}",
                details={"from": source, "to": wanted},
            )

    def sources(self, target: str) -> frozenset[str]:
        """Every status the table lets move to ``target`` (a compare-and-set's ``IN`` list)."""
        wanted = self.status(target)
        return frozenset(s for s in self.statuses if wanted in self.transitions[s])

    def is_terminal(self, status: str) -> bool:
        return not self.transitions[self.status(status)]


def _table(
    statuses: Iterable[StrEnum], moves: Mapping[StrEnum, Iterable[StrEnum]]
) -> Mapping[str, frozenset[str]]:
    # Plain strings, so the table reads (and serialises) the same as the database column.
    return MappingProxyType(
        {s.value: frozenset(t.value for t in moves.get(s, ())) for s in statuses}
    )


# --- Run --------------------------------------------------------------------------------------


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


_R = RunStatus

RUN: Final = StateMachine(
    entity="run",
    statuses=tuple(s.value for s in RunStatus),
    initial=frozenset({_R.QUEUED.value}),
    transitions=_table(
        RunStatus,
        {
            _R.QUEUED: (_R.RUNNING, _R.CANCELLED, _R.TIMED_OUT, _R.FAILED),
            _R.RUNNING: (
                _R.QUEUED,
                _R.WAITING,
                _R.NEEDS_REVIEW,
                _R.SUCCEEDED,
                _R.FAILED,
                _R.CANCELLED,
                _R.TIMED_OUT,
            ),
            _R.WAITING: (_R.QUEUED, _R.CANCELLED, _R.TIMED_OUT, _R.FAILED),
            _R.NEEDS_REVIEW: (_R.QUEUED, _R.FAILED, _R.CANCELLED),
        },
    ),
)

#: Every run status, in lifecycle order.
STATUSES: Final[tuple[str, ...]] = RUN.statuses
TERMINAL: Final[frozenset[str]] = RUN.terminal
#: Statuses a run can still leave: it counts against queues and can be cancelled.
ACTIVE: Final[frozenset[str]] = frozenset(STATUSES) - TERMINAL
TRANSITIONS: Final[Mapping[str, frozenset[str]]] = RUN.transitions


def can_transition(current: str, target: str) -> bool:
    """Whether the run table allows ``current -> target`` (unknown statuses: ``ValueError``)."""
    return RUN.can(current, target)


def check_transition(current: str, target: str) -> None:
    """Raise ``IllegalTransition`` unless the run table allows ``current -> target``."""
    RUN.check(current, target)


def is_terminal(status: str) -> bool:
    return RUN.is_terminal(status)


# --- Interrupt --------------------------------------------------------------------------------


class InterruptStatus(StrEnum):
    """Whether a person's decision is still awaited."""

    PENDING = "pending"
    RESOLVED = "resolved"
    EXPIRED = "expired"


_I = InterruptStatus

INTERRUPT: Final = StateMachine(
    entity="interrupt",
    statuses=tuple(s.value for s in InterruptStatus),
    initial=frozenset({_I.PENDING.value}),
    transitions=_table(InterruptStatus, {_I.PENDING: (_I.RESOLVED, _I.EXPIRED)}),
)


# --- Effect -----------------------------------------------------------------------------------


class EffectStatus(StrEnum):
    """Where one side effect of a step is: before, during or after its call, or under review."""

    PREPARED = "prepared"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NEEDS_REVIEW = "needs_review"
    RESOLVED = "resolved"


_E = EffectStatus

EFFECT: Final = StateMachine(
    entity="effect",
    statuses=tuple(s.value for s in EffectStatus),
    # A selector's decision is recorded already succeeded (effects_app.services.LedgerDecisions).
    initial=frozenset({_E.PREPARED.value, _E.SUCCEEDED.value}),
    transitions=_table(
        EffectStatus,
        {
            _E.PREPARED: (_E.STARTED,),
            # started -> prepared: an idempotent effect found started after a crash, to be
            # called again with the same idempotency key (a non-idempotent one goes to
            # needs_review).
            _E.STARTED: (_E.PREPARED, _E.SUCCEEDED, _E.FAILED, _E.NEEDS_REVIEW),
            _E.FAILED: (_E.STARTED,),  # the step is retried and calls it again
            _E.NEEDS_REVIEW: (_E.RESOLVED,),
            # not_applied: the run calls it once more ("applied" / "cancel_run" stay resolved).
            _E.RESOLVED: (_E.STARTED,),
        },
    ),
)


# --- Typed column changes ---------------------------------------------------------------------


class Unset(Enum):
    """The marker of a field a :class:`Changes` value leaves alone (``None`` is a value)."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET


@dataclass(frozen=True)
class Changes:
    """Base of the typed column changes that go with a transition: each field is a column, a
    field left :data:`UNSET` is not written (so the UPDATE names only the columns set)."""

    def columns(self) -> dict[str, Any]:
        """The columns to write, by field name, in declaration order."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) is not UNSET
        }
