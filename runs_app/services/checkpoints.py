"""Checkpoints: a step's commit (its held chunks, state delta, next nodes and event, fenced by
the lease; a final step also ends the run), the state at a checkpoint, and repointing a run's
working session.

On PostgreSQL a step commit is one prepared statement (the run, checkpoint and event parts here,
the session's append and writer claim from :mod:`sessions_app.append_sql`); elsewhere one short
transaction writing the same rows (:mod:`.composed` picks the path).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from psycopg.types.numeric import Int8

from openrath_project.errors import Conflict
from openrath_project.jsontext import canonical, digest
from runs_app.models import Checkpoint, Run, RunEvent
from runs_app.services import composed
from runs_app.services.eventlog import add_event, publish_event, save_with_event
from runs_app.services.leases import Claim, StaleLease, session_length
from runs_app.services.runs import branch_finished
from runs_app.state_delta import apply, diff
from runs_app.transitions import check_transition
from sessions_app import append_sql as session_sql
from sessions_app import context as session_context
from sessions_app import services as session_services
from sessions_app import streaming
from sessions_app.chunk_rules import ChunkDraft
from sessions_app.models import Session

_RUN = Run._meta.db_table
_EVENT = RunEvent._meta.db_table
_CHECKPOINT = Checkpoint._meta.db_table

#: A chain of deltas is never longer than this, whatever its bytes (bounds a rebuild's steps).
KEYFRAME_MAX_CHAIN = 1000
#: Deltas may add up to this many bytes before a small state is stored whole again.
KEYFRAME_MIN_BYTES = 4096


@dataclass
class Keyframes:
    """When a worker stores a run's state whole (a keyframe) instead of a delta: chosen by the
    bytes of deltas stored since the last whole state, not by a count. The state is stored whole
    again when those deltas reach twice its size (or ``KEYFRAME_MIN_BYTES`` for a small state),
    so each whole state is paid for by twice as many delta bytes — storage stays linear in what
    changed even when the state grows every step, at most about 1.5 times it — and a rebuild
    reads at most about three times the state. (At once as many, a conversation kept in the
    state cost 2.5x its logical bytes; 2.0x now: W3m in benchmarks/runs.py.) A worker keeps one
    per claim; a new claim starts unknown, so its first checkpoint is whole (what was stored
    before it is not re-read)."""

    #: Bytes of deltas since the last whole state (``None``: not known to this worker).
    delta_bytes: int | None = None
    #: Deltas since the last whole state.
    chain: int = 0

    def keyframe_now(self, delta_len: int, state_len: int) -> bool:
        if self.delta_bytes is None or self.chain >= KEYFRAME_MAX_CHAIN:
            return True
        return self.delta_bytes + delta_len >= max(2 * state_len, KEYFRAME_MIN_BYTES)

    def stored(self, *, full: bool, length: int) -> None:
        if full:
            self.delta_bytes, self.chain = 0, 0
        elif self.delta_bytes is not None:
            self.delta_bytes += length
            self.chain += 1


def _stale(claim: Claim) -> StaleLease:
    return StaleLease(
        "the run's lease is no longer this worker's", details={"run": str(claim.run_id)}
    )


@dataclass
class StepCommit:
    """What a step (or router) attempt produced, to be committed atomically."""

    step: str
    state: dict[str, Any]
    previous_state: dict[str, Any]
    next_nodes: list[str]
    attempt: int
    event: str = "step.completed"
    event_data: dict[str, Any] | None = None
    #: A final status to move to in the same transaction (``succeeded``), with the output.
    finish: str | None = None
    #: The chunks the step held for the working session, written with the checkpoint.
    chunks: list[ChunkDraft] = field(default_factory=list)
    #: The working session's length once ``chunks`` are appended, when the worker knows it (its
    #: step buffer's ``stored_length`` after taking them); ``None``: read from the session. With
    #: chunks the commit is refused (:class:`StaleLease`, nothing written) unless the append
    #: ends there; without chunks it is not used.
    session_len: int | None = None
    #: ``canonical(state)`` when the worker has it (its state track keeps it up to date by what
    #: changed); ``None``: encoded here.
    state_text: str | None = None


def _step_commit_sql(*, finishing: bool) -> str:
    """The step commit as one statement: the run row (fenced by the lease), the session's append
    (the session app's pieces, fenced by the session's writer), the checkpoint and the step's
    event; ``finishing`` also ends the run (``succeeded``, output, writer released,
    ``run.succeeded``).

    The lock order is the portable path's (the run row, then its session). The writer check and
    the session's new length come from the append's own ``UPDATE ... RETURNING`` (one read of the
    session row, not two more): the checkpoint's ``session_len`` is that length, and NULL when
    the append did not happen or ended elsewhere than the run expects, which its NOT NULL column
    refuses, so the statement fails whole and writes nothing, the run row's update included
    (:func:`sessions_app.append_sql.fenced_length`; :func:`_sql_commit` reports it as a stale
    lease). The length the run expects is ``%(session_len)s`` when the worker knows it (its step
    buffer's: nothing else of the session is read) and otherwise the session's stored length
    plus the chunks (a read of the row in the run's update).

    A commit does not renew the lease, on either path: the watchdog's heartbeat does, and
    ``lease_expires_at`` is indexed, so writing it with every step would make each run-row update
    a non-HOT one (an entry in every index of the table: +33% WAL a step)."""
    if finishing:
        ending = """status = 'succeeded',
        state = %(whole_state)s::jsonb,
        output = %(whole_state)s::jsonb,
        state_seq = checkpoint_seq + 1,
        fanout = NULL,
        lease_owner = '',
        lease_expires_at = NULL,
        finished_at = now(),"""
        succeeded = """
UNION ALL
SELECT r.id, r.event_seq, 'run.succeeded', '', jsonb_build_object('checkpoint', c.seq), now()
FROM r, c"""
    else:
        ending = ""
        succeeded = ""
    events = 2 if finishing else 1
    return f"""
WITH r AS (
    UPDATE {_RUN}
    SET checkpoint_seq = checkpoint_seq + 1,
        event_seq = event_seq + {events},
        next_nodes = %(next_nodes)s::jsonb,
        attempt = 1,
        session_len = COALESCE(%(session_len)s::bigint, {session_sql.current_length(_RUN)} + %(n)s),
        {ending}
        updated_at = now()
    WHERE id = %(run)s AND fencing_token = %(token)s AND status = 'running'
    RETURNING id, checkpoint_seq, event_seq, session_id, session_len, parent_id
), {session_sql.append_ctes("r", release=finishing)}, c AS (
    INSERT INTO {_CHECKPOINT}
        (run_id, seq, step, next_nodes, "full", state, state_digest, session_id, session_len,
         fencing_token, attempt, created_at)
    SELECT r.id, r.checkpoint_seq, %(step)s, %(next_nodes)s::jsonb, %(full)s, %(state)s::jsonb,
           %(digest)s, r.session_id, {session_sql.fenced_length("r")}, %(token)s, %(attempt)s,
           now()
    FROM r
    RETURNING seq
)
INSERT INTO {_EVENT} (run_id, seq, type, step, data, created_at)
SELECT r.id, r.event_seq - {events - 1}, %(event)s, %(step)s,
       (%(event_data)s::jsonb || jsonb_build_object('checkpoint', c.seq,
                                                    'chunks', (SELECT count(*) FROM ch))),
       now()
FROM r, c{succeeded}
RETURNING seq, (SELECT session_id FROM r), (SELECT session_len FROM r),
          (SELECT parent_id FROM r), (SELECT checkpoint_seq FROM r)
"""  # noqa: S608 - table names from model metadata, values are parameters


_COMMIT_SQL = _step_commit_sql(finishing=False)
_FINISH_SQL = _step_commit_sql(finishing=True)


def checkpoint_commit(
    *,
    claim: Claim,
    commit: StepCommit,
    checkpoint_seq: int,
    keyframes: Keyframes | None = None,
) -> int:
    """Commit a step: its held chunks, its checkpoint (state delta, session reference, next
    nodes) and its event, fenced by the lease; with ``commit.finish`` also the run's end.
    Returns the new checkpoint's sequence; :class:`StaleLease` when the lease is gone (nothing
    is written). ``checkpoint_seq`` is the last one this worker wrote; ``keyframes`` what it
    stored since its last whole state (without one, the state is stored whole).

    On PostgreSQL this is one prepared statement (one round trip); elsewhere one short
    transaction writing the same rows.
    """
    keyframes = keyframes if keyframes is not None else Keyframes()
    state = commit.state
    state_json = commit.state_text if commit.state_text is not None else canonical(state)
    full = checkpoint_seq == 0 or keyframes.delta_bytes is None
    stored_state: Any = state
    stored_len = len(state_json)
    if not full:
        delta = diff(commit.previous_state, state)
        delta_len = len(canonical(delta))
        if keyframes.keyframe_now(delta_len, len(state_json)):
            full = True
        else:
            stored_state, stored_len = delta, delta_len
    state_digest = hashlib.sha256(state_json.encode()).hexdigest()  # digest(state), encoded once
    event_data = dict(commit.event_data or {})
    event_data.setdefault("attempt", commit.attempt)
    event_data.setdefault("next", commit.next_nodes)
    if commit.finish is not None:
        check_transition("running", commit.finish)
    stored = _Stored(stored_state, full, state_digest, event_data, state_json)
    if composed.composed_sql() and commit.finish in (None, "succeeded"):
        seq = _sql_commit(claim, commit, stored)
    else:
        seq = _orm_commit(claim, commit, stored)
    keyframes.stored(full=full, length=stored_len)
    return seq


@dataclass(frozen=True)
class _Stored:
    """What the checkpoint of a step commit stores: the state whole or as a delta, its digest
    and the step event's data (the same on both commit paths)."""

    state: Any
    full: bool
    digest: str
    event_data: dict[str, Any]
    #: The state's canonical text (the run's output when the commit finishes it).
    text: str


def _sql_commit(claim: Claim, commit: StepCommit, stored: _Stored) -> int:
    drafts = commit.chunks
    finishing = commit.finish == "succeeded"
    params = {
        "run": claim.run_id,
        "token": Int8(claim.token),
        "next_nodes": json.dumps([] if finishing else commit.next_nodes),
        "step": commit.step,
        "full": stored.full,
        "state": json.dumps(stored.state),
        "digest": stored.digest,
        "attempt": Int8(commit.attempt),
        "event": commit.event,
        "event_data": json.dumps(stored.event_data),
        "session_len": _expected_length(commit),
        **session_sql.append_params(drafts),
    }
    if finishing:
        params["whole_state"] = stored.text
    try:
        rows = composed.execute_composed(_FINISH_SQL if finishing else _COMMIT_SQL, params)
    except IntegrityError as exc:  # the append was not this lease's, or did not end as expected
        if not session_sql.unfenced_append(exc, _CHECKPOINT):
            raise
        raise _stale(claim) from exc
    if not rows:
        raise _stale(claim)
    session_id, session_len, parent_id = rows[0][1], int(rows[0][2]), rows[0][3]
    for row in rows:
        publish_event(claim.run_id, int(row[0]))
    if drafts:
        span = (session_len - len(drafts), session_len - 1)
        transaction.on_commit(lambda: streaming.chunks_committed(session_id, span))
    if finishing and parent_id is not None:
        branch_finished(Run(id=claim.run_id, parent_id=parent_id))
    return int(rows[0][4])


def _expected_length(commit: StepCommit) -> Int8 | None:
    """The session length the step statement expects after the append (only with chunks)."""
    if not commit.chunks or commit.session_len is None:
        return None
    return Int8(commit.session_len)


def _orm_commit(claim: Claim, commit: StepCommit, stored: _Stored) -> int:
    """The portable step commit: the same rows as the composed statement, in one transaction
    that locks the run row first (the one lock order: run, then what belongs to it)."""
    finish = commit.finish
    with transaction.atomic():
        run = Run.objects.select_for_update().get(id=claim.run_id)
        if run.fencing_token != claim.token or run.status != "running":
            raise _stale(claim)
        if commit.chunks:
            try:
                _write_held_chunks(run, claim, commit.chunks)
            except (session_services.StaleFence, session_services.SessionBusy) as exc:
                raise _stale(claim) from exc  # the session is not this lease's: as the SQL
        now = timezone.now()
        run.checkpoint_seq += 1
        run.session_len = session_length(run.session_id)
        expected = _expected_length(commit)
        if expected is not None and run.session_len != expected:
            raise _stale(claim)  # the append did not end where the worker expects: as the SQL
        run.next_nodes = [] if finish is not None else list(commit.next_nodes)
        run.attempt = 1
        Checkpoint.objects.create(
            run_id=run.id,
            seq=run.checkpoint_seq,
            step=commit.step,
            next_nodes=run.next_nodes,
            full=stored.full,
            state=stored.state,
            state_digest=stored.digest,
            session_id=run.session_id,
            session_len=run.session_len,
            fencing_token=claim.token,
            attempt=commit.attempt,
        )
        event_data = {
            **stored.event_data,
            "checkpoint": run.checkpoint_seq,
            "chunks": len(commit.chunks),
        }
        add_event(run, commit.event, step=commit.step, data=event_data)
        fields = ["checkpoint_seq", "session_len", "next_nodes", "attempt", "event_seq"]
        if finish is not None:
            run.status = finish
            run.state, run.state_seq = commit.state, run.checkpoint_seq
            run.output = commit.state
            run.fanout = None
            run.lease_owner, run.lease_expires_at = "", None
            run.finished_at = now
            add_event(run, f"run.{finish}", data={"checkpoint": run.checkpoint_seq})
            fields += ["status", "state", "state_seq", "output", "fanout", "lease_owner"]
            fields += ["lease_expires_at", "finished_at"]
            if run.session_id is not None:
                session_services.session_release_writer(session_id=run.session_id, run_id=run.id)
        run.save(update_fields=[*fields, "updated_at"])
    if finish is not None and run.parent_id is not None:
        branch_finished(run)
    return int(run.checkpoint_seq)


def _write_held_chunks(run: Run, claim: Claim, drafts: list[ChunkDraft]) -> None:
    """Inside the commit's transaction: the chunks the step held, under the lease's fence."""
    if run.session_id is None:
        raise StaleLease("the run has no working session", details={"run": str(run.id)})
    session = Session(id=run.session_id, tenant_id=run.tenant_id)
    session_services.append_now(session, drafts, session_context.Fence(claim.run_id, claim.token))


# --- Reading and repointing ---------------------------------------------------------------------


def run_state_at(run: Run, seq: int | None = None) -> dict[str, Any]:
    """The state after checkpoint ``seq`` (default: the latest), rebuilt from the last full
    checkpoint and the deltas after it (one query), verified against the stored digest."""
    target = run.checkpoint_seq if seq is None else seq
    if target == 0:
        return dict(run.input)
    if target == run.state_seq:
        return dict(run.state)
    base = (
        Checkpoint.objects.filter(run=run, seq__lte=target, full=True)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    if base is None:
        raise Conflict(f"checkpoint {target} of run {run.id} cannot be rebuilt")
    rows = list(
        Checkpoint.objects.filter(run=run, seq__gte=base, seq__lte=target)
        .order_by("seq")
        .values("seq", "full", "state", "state_digest")
    )
    state: dict[str, Any] = {}
    for row in rows:
        state = dict(row["state"]) if row["full"] else apply(state, row["state"])
    if digest(state) != rows[-1]["state_digest"]:
        raise Conflict(f"checkpoint {target} of run {run.id} does not match its digest")
    return state


def run_repoint_session(*, claim: Claim, session: Session, abandoned: Session | None) -> None:
    """Make ``session`` the run's working session (a fork at the checkpoint after a crashed
    attempt, or the merge of a join), fenced by the lease."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(id=claim.run_id)
        if run.fencing_token != claim.token or run.status != "running":
            raise StaleLease(
                "the run's lease is no longer this worker's", details={"run": str(claim.run_id)}
            )
        previous = run.session_id
        run.session = session
        run.session_len = session.length
        save_with_event(
            run,
            "session.switched",
            fields=["session", "session_len"],
            data={
                "from": str(previous) if previous else None,
                "to": str(session.id),
                "length": session.length,
                "abandoned": str(abandoned.id) if abandoned else None,
            },
        )
