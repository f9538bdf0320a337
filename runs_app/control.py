"""Control-flow signals between a step, the executor and the ledgers.

They derive from ``BaseException`` so a step's own ``except Exception`` does not swallow them.
"""

from __future__ import annotations

from typing import Any


class StepInterrupted(BaseException):  # noqa: N818 - a signal, not an error
    """Base of the exceptions the watchdog raises inside a step."""


class StepTimeout(StepInterrupted):
    """The step ran longer than its ``timeout_seconds``."""


class DeadlineExceeded(StepInterrupted):
    """The run's deadline passed."""


class LeaseLost(StepInterrupted):
    """The lease is gone: the run was cancelled or another worker took it over."""


class StepSuspended(BaseException):  # noqa: N818 - control flow
    """The step asked to wait (an interrupt); the run is already ``waiting``."""


class NeedsReview(BaseException):  # noqa: N818 - control flow
    """The step hit something only an operator can decide (an ambiguous effect)."""

    def __init__(self, reason: str, data: dict[str, Any]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.data = data


class InterruptRejected(Exception):  # noqa: N818 - named for what happened (flow.InterruptRejected)
    """``ctx.interrupt(...)`` was answered with *reject* (or expired into a reject).

    A step may catch it to take another path; uncaught, it fails the step like any error.
    """

    def __init__(self, decision: Any) -> None:
        super().__init__(f"interrupt rejected: {getattr(decision, 'reason', '') or 'no reason'}")
        self.decision = decision
