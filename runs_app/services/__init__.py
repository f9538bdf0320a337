"""Run writes: create, transitions, leases, checkpoints, retries, cancellation, branches.

Every run state change goes through here. One transition table
(:mod:`runs_app.transitions`) and one function, :func:`run_transition`, apply status changes
with a compare-and-set under the row lock and append the run event in the same transaction;
interrupts and effects change status only through :func:`ledger_transition` (their transition
tables are in :mod:`runs_app.transitions` too). The hot path of a worker (claim, heartbeat,
checkpoint) is conditional UPDATEs fenced by the lease's token: a worker whose lease expired, or
whose run was cancelled, commits nothing. The reconciler, which expires interrupts too, is
:mod:`runs_app.reconciler`, above this package.

Locking: run rows are locked one at a time, always before the run's interrupt and effect rows
and before any session row (run -> interrupt | effect -> session); a branch locks its parent
only after it committed its own end (see :func:`branch_finished`).

One module per operation, each importing only those below it (the import-linter contract
"runs_app layers" in pyproject.toml keeps the order):

* :mod:`.branches` — a router's fan-out, its end, a branch's completion;
* :mod:`.checkpoints` — a step's commit, the state at a checkpoint, repointing the working
  session; :mod:`.ledger` — the interrupt and effect rows' status changes;
* :mod:`.runs` — create, :func:`run_transition`, the stopping points, a branch's end;
* :mod:`.leases` — the claim, the heartbeat, :class:`StaleLease`;
* :mod:`.composed` (the PostgreSQL statements' switch) and :mod:`.eventlog` (a run's events).

Callers use this package's names (``from runs_app import services``); the modules are its
inside.
"""

from runs_app.services.branches import branch_complete, fanout_clear, fanout_start
from runs_app.services.checkpoints import (
    KEYFRAME_MAX_CHAIN,
    KEYFRAME_MIN_BYTES,
    Keyframes,
    StepCommit,
    checkpoint_commit,
    run_repoint_session,
    run_state_at,
)
from runs_app.services.leases import Claim, StaleLease, lease_claim, lease_heartbeat
from runs_app.services.ledger import RunMove, ledger_transition
from runs_app.services.runs import (
    RunChanges,
    active_runs_on,
    branch_finished,
    check_policy,
    concurrent_input_repair,
    opaque_plan_store,
    plan_store,
    run_cancel,
    run_create,
    run_create_opaque,
    run_fail,
    run_interrupted,
    run_needs_review,
    run_release_followers,
    run_resume,
    run_schedule_retry,
    run_transition,
)

__all__ = [
    "KEYFRAME_MAX_CHAIN",
    "KEYFRAME_MIN_BYTES",
    "Keyframes",
    "Claim",
    "RunChanges",
    "RunMove",
    "StaleLease",
    "StepCommit",
    "branch_complete",
    "branch_finished",
    "checkpoint_commit",
    "fanout_clear",
    "fanout_start",
    "lease_claim",
    "lease_heartbeat",
    "ledger_transition",
    "opaque_plan_store",
    "plan_store",
    "active_runs_on",
    "check_policy",
    "concurrent_input_repair",
    "run_cancel",
    "run_create",
    "run_create_opaque",
    "run_fail",
    "run_interrupted",
    "run_needs_review",
    "run_release_followers",
    "run_repoint_session",
    "run_resume",
    "run_schedule_retry",
    "run_state_at",
    "run_transition",
]
