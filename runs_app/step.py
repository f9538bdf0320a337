"""A reference to one pass through a step: what the ledgers that act for a step need of it.

Interrupts, effects, recorded decisions and budget checks write rows on behalf of the step that
is running (tagged with its run, step, checkpoint, tenant and project) and fenced by its lease.
They take a :class:`StepRef` (``StepContext.ref``) instead of the handler's whole context, so
they depend on this module and not on the executor. Pure Python: no Django import.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class StepRef:
    """One pass through one step of a run, under one lease."""

    run_id: uuid.UUID
    #: The step's node id.
    step: str
    #: The run's checkpoint when the step started (a pass is a step at a checkpoint).
    checkpoint_seq: int
    #: The lease the step runs under: its writes are refused once another holds the run.
    fencing_token: int
    tenant_id: uuid.UUID
    project_id: uuid.UUID
    #: The run's working session during the step.
    session_id: uuid.UUID
